"""Conditional flow matching with masked prediction (MusicFlow, section 3; Voicebox's OT path).

Path and target (eq. 1-2): x_t = (1 - (1 - sigma_min) t) x_0 + t x_1, u_t = x_1 - (1 - sigma_min) x_0,
with x_0 ~ N(0, I) and x_1 the data. Masked objective (eq. 3):
L = E ||m * (v_theta(x_t, x_ctx, c, w, t) - u_t)||^2 / |m|, x_ctx = (1 - m) * x_1, where m is a
binary temporal mask (1 = frames to generate) and c the per-frame condition (stage 2: the semantic
features). Sampling integrates dx/dt = v with Euler steps from t = 0 to 1, with classifier-free
guidance on the text w; the known frames of x_t stay on the data's own path at every step. The
no-masking baseline is trained with m = 1 only and infills with an empty context input
(`euler_sample(replace=...)`), so the path of the known frames is all it sees of them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

NULL_TEXT = -1  # label used for the dropped text (classifier-free guidance); mapped to an extra embedding


class FlowNet(nn.Module):
    """A small transformer over frames predicting the velocity v(x_t, x_ctx, m, c, w, t)."""

    def __init__(self, dim: int, cond_dim: int, num_text: int, frames: int, hidden: int, layers: int, heads: int):
        super().__init__()
        self.dim, self.cond_dim, self.num_text = dim, cond_dim, num_text
        self.inp = nn.Linear(2 * dim + 1 + cond_dim, hidden)  # x_t, context, mask flag, condition
        self.pos = nn.Parameter(torch.randn(frames, hidden) * 0.02)
        self.text = nn.Embedding(num_text + 1, hidden)  # last row: no text
        self.time = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0, batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, dim))

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, context: torch.Tensor, mask: torch.Tensor,
                text: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """``x_t, context``: [B, T, dim]; ``t``: [B]; ``mask``: [B, T]; ``text``: [B] (-1: none);
        ``cond``: [B, T, c]."""
        parts = [x_t, context, mask[..., None]]
        if self.cond_dim:
            assert cond is not None  # a conditioned stage is given its condition
            parts.append(cond)
        text_index = torch.where(text < 0, torch.full_like(text, self.num_text), text)
        h = self.inp(torch.cat(parts, -1)) + self.pos[: x_t.shape[1]]
        h = h + (self.text(text_index) + self.time(time_embedding(t, h.shape[-1])))[:, None]
        return self.out(self.body(h))


def time_embedding(t: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1]."""
    freqs = torch.exp(-math.log(1000.0) * torch.arange(width // 2) / (width // 2))
    angles = 1000.0 * t[:, None] * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], -1)


def ot_path(x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor, sigma_min: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The conditional OT path point x_t and its velocity u_t (eq. 1-2)."""
    tt = t[:, None, None]
    return (1 - (1 - sigma_min) * tt) * x0 + tt * x1, x1 - (1 - sigma_min) * x0


def training_mask(batch: int, frames: int, full_prob: float, span_min: float,
                  generator: torch.Generator) -> torch.Tensor:
    """Masks of the masked-prediction objective: all ones with ``full_prob``, else one random span of
    ``span_min``..100 % of the frames (1 = generate, 0 = context)."""
    mask = torch.zeros(batch, frames)
    full = torch.rand(batch, generator=generator) < full_prob
    fraction = span_min + (1 - span_min) * torch.rand(batch, generator=generator)
    lengths = (fraction * frames).round().long().clamp(1, frames)
    starts = (torch.rand(batch, generator=generator) * (frames - lengths + 1)).long()
    frame = torch.arange(frames)[None]
    mask[(frame >= starts[:, None]) & (frame < (starts + lengths)[:, None])] = 1.0
    mask[full] = 1.0
    return mask


def masked_fm_loss(model: FlowNet, x1: torch.Tensor, text: torch.Tensor, mask: torch.Tensor,
                   cond: torch.Tensor | None, sigma_min: float, generator: torch.Generator) -> torch.Tensor:
    """Eq. 3: the velocity error on the masked frames only; context frames carry no loss."""
    x0 = torch.randn(x1.shape, generator=generator)
    t = torch.rand(len(x1), generator=generator)
    x_t, target = ot_path(x0, x1, t, sigma_min)
    context = (1 - mask[..., None]) * x1
    velocity = model(x_t, t, context, mask, text, cond)
    squared = (mask[..., None] * (velocity - target)) ** 2
    return squared.sum() / (mask.sum() * x1.shape[-1]).clamp_min(1.0)


def guided_velocity(model: FlowNet, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, mask: torch.Tensor,
                    text: torch.Tensor, cond: torch.Tensor | None, guidance: float) -> torch.Tensor:
    """Classifier-free guidance: v_none + g (v_text - v_none); g = 1 is the plain conditional velocity."""
    v_text = model(x, t, context, mask, text, cond)
    if guidance == 1.0:
        return v_text
    v_none = model(x, t, context, mask, torch.full_like(text, NULL_TEXT), cond)
    return v_none + guidance * (v_text - v_none)


@torch.no_grad()
def euler_sample(model: FlowNet, text: torch.Tensor, steps: int, generator: torch.Generator, *,
                 mask: torch.Tensor | None = None, known: torch.Tensor | None = None,
                 cond: torch.Tensor | None = None, guidance: float = 1.0, sigma_min: float = 0.0,
                 replace: bool = False) -> torch.Tensor:
    """Integrate the flow from noise; frames with ``mask`` 0 are taken from ``known``.

    At every Euler step the known frames of x_t are set to the data's own path
    x_t = (1 - (1 - sigma_min) t) x_0 + t x_known with the same noise draw x_0: that is what the
    network saw there in training (eq. 1), and its velocity was never trained on those frames
    (eq. 3), so integrating it there would drift the input it reads. Masked-trained models also
    see ``known`` as context (zero-shot infilling/continuation); with ``replace`` (the no-masking
    baseline, which never saw context) the context input stays empty and the mask flag full.
    """
    batch, frames = len(text), model.pos.shape[0]
    shape = (batch, frames, model.dim)
    mask = torch.ones(batch, frames) if mask is None else mask
    known = torch.zeros(shape) if known is None else known
    x0 = torch.randn(shape, generator=generator)
    keep = mask[..., None]
    context = torch.zeros(shape) if replace else (1 - keep) * known
    model_mask = torch.ones_like(mask) if replace else mask
    x = x0
    for i in range(steps):
        t = torch.full((batch,), i / steps)
        x = keep * x + (1 - keep) * ot_path(x0, known, t, sigma_min)[0]
        x = x + guided_velocity(model, x, t, context, model_mask, text, cond, guidance) / steps
    return keep * x + (1 - keep) * known
