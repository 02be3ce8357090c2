"""The text-conditioned audio diffusion model of the PPAE miniature, with controllable cross-attention.

A denoiser over 32 time-frame tokens (each a 32-band spectral column): per block, self-attention,
cross-attention to the caption's token embeddings and an MLP. Every cross-attention layer passes
its probabilities A = softmax(Q K^T / sqrt(d)) (``[B, heads, frames, tokens]``) through the
model's `AttentionControl`, which records them (to localise an event), replaces them with the
source prompt's maps (Prompt-to-Prompt word swap), or reweights one token's column; this is the
hook PPAE's editing works through. The model predicts the noise (DDPM, eps-parametrisation).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from testbed.workloads.ppae.data import BANDS, CAPTION, FRAMES, VOCAB


class AttentionControl:
    """What the cross-attention layers do with their probabilities during one forward pass.

    ``record``: keep a copy per layer; ``inject``: use these maps (per layer) instead; ``weight``
    (``[B, tokens]``): multiply each token's column by its weight, not renormalised, as in
    Prompt-to-Prompt's reweighting.
    """

    def __init__(self, record: bool = False, inject: list[torch.Tensor] | None = None,
                 weight: torch.Tensor | None = None):
        self.record, self.inject, self.weight = record, inject, weight
        self.maps: list[torch.Tensor] = []

    def __call__(self, layer: int, probs: torch.Tensor) -> torch.Tensor:
        if self.inject is not None:
            probs = self.inject[layer]
        if self.weight is not None:
            probs = probs * self.weight[:, None, None, :]
        if self.record:
            self.maps.append(probs.detach())
        return probs


class CrossAttention(nn.Module):
    """Multi-head attention from frames to caption tokens whose probabilities go through a control."""

    def __init__(self, hidden: int, heads: int, layer: int):
        super().__init__()
        self.heads, self.layer = heads, layer
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, text: torch.Tensor, control: AttentionControl | None) -> torch.Tensor:
        batch, frames, hidden = h.shape
        split = lambda x: x.view(batch, -1, self.heads, hidden // self.heads).transpose(1, 2)
        q, k, v = split(self.query(h)), split(self.key(text)), split(self.value(text))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hidden // self.heads), dim=-1)
        if control is not None:
            probs = control(self.layer, probs)
        return self.out((probs @ v).transpose(1, 2).reshape(batch, frames, hidden))


class Block(nn.Module):
    """Self-attention over frames, cross-attention to the caption, MLP; pre-norm residuals."""

    def __init__(self, hidden: int, heads: int, layer: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(3))
        self.self_attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.cross = CrossAttention(hidden, heads, layer)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))

    def forward(self, h: torch.Tensor, text: torch.Tensor, control: AttentionControl | None) -> torch.Tensor:
        x = self.norms[0](h)
        h = h + self.self_attn(x, x, x, need_weights=False)[0]
        h = h + self.cross(self.norms[1](h), text, control)
        return h + self.mlp(self.norms[2](h))


class Denoiser(nn.Module):
    """eps_theta(x_t, t, caption): the text-conditioned noise predictor."""

    def __init__(self, hidden: int, heads: int, layers: int, steps: int):
        super().__init__()
        self.steps = steps
        self.inp = nn.Linear(BANDS, hidden)
        self.pos = nn.Parameter(torch.randn(FRAMES, hidden) * 0.02)
        self.tokens = nn.Embedding(VOCAB, hidden)
        self.token_pos = nn.Parameter(torch.randn(CAPTION, hidden) * 0.02)
        self.time = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.blocks = nn.ModuleList(Block(hidden, heads, i) for i in range(layers))
        self.out = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, BANDS))
        self.control: AttentionControl | None = None

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, caption: torch.Tensor) -> torch.Tensor:
        """``x_t``: [B, frames, bands]; ``t``: [B] integer steps; ``caption``: [B, 3] token ids."""
        width = self.pos.shape[1]
        freqs = torch.exp(-math.log(10000.0) * torch.arange(width // 2) / (width // 2))
        angles = t.float()[:, None] * freqs[None]
        h = self.inp(x_t) + self.pos + self.time(torch.cat([angles.sin(), angles.cos()], -1))[:, None]
        text = self.tokens(caption) + self.token_pos
        for block in self.blocks:
            h = block(h, text, self.control)
        return self.out(h)


def alpha_bars(steps: int) -> torch.Tensor:
    """Cumulative signal shares of the cosine schedule (Nichol & Dhariwal), clipped away from 0."""
    s = 0.008
    grid = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    f = torch.cos((grid + s) / (1 + s) * math.pi / 2) ** 2
    return (f[1:] / f[0]).clamp(1e-4, 0.9999).float()


def diffusion_loss(model: Denoiser, x0: torch.Tensor, caption: torch.Tensor, abar: torch.Tensor,
                   generator: torch.Generator) -> torch.Tensor:
    """DDPM's simple loss ||eps - eps_theta(sqrt(abar) x0 + sqrt(1 - abar) eps, t, caption)||^2."""
    t = torch.randint(0, len(abar), (len(x0),), generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    a = abar[t][:, None, None]
    return ((model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, caption) - noise) ** 2).mean()
