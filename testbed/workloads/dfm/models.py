"""Networks of the DFM workload: a sequence denoiser and the joint structure-and-sequence network."""

from __future__ import annotations

import torch
from torch import nn


def time_embedding(t: torch.Tensor, dim: int = 16) -> torch.Tensor:
    """Sinusoidal features of ``t in [0, 1]`` at octave-spaced frequencies."""
    frequencies = 2.0 ** torch.arange(dim // 2)
    angles = t[:, None] * frequencies[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def mlp(width_in: int, hidden: int, width_out: int) -> nn.Sequential:
    """Three SiLU hidden layers."""
    return nn.Sequential(nn.Linear(width_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, width_out))


class SequenceDenoiser(nn.Module):
    """``p_theta(x_1 | x_t, t)``: logits ``[n, length, vocab]`` from token embeddings (MASK included) and t."""

    def __init__(self, vocab: int, length: int, hidden: int, embed: int = 16):
        super().__init__()
        self.vocab, self.length = vocab, length
        self.tokens = nn.Embedding(vocab + 1, embed)
        self.net = mlp(embed * length + 16, hidden, vocab * length)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        features = torch.cat([self.tokens(x_t).flatten(1), time_embedding(t)], dim=1)
        return self.net(features).view(-1, self.length, self.vocab)

    def probabilities(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The denoiser as the samplers call it."""
        return self.forward(x_t, t).softmax(-1)


class JointNet(nn.Module):
    """One trunk, two heads: the clean structure ``x_1`` and the clean sequence's logits.

    Its inputs are the noisy coordinates, the partly masked sequence and one time per modality,
    so the same network co-designs (both times move), folds (sequence time fixed at 1) and
    inverse-folds (structure time fixed at 1), as in Multiflow.
    """

    def __init__(self, vocab: int, residues: int, hidden: int, embed: int = 16):
        super().__init__()
        self.vocab, self.residues = vocab, residues
        self.points = residues + 1
        self.tokens = nn.Embedding(vocab + 1, embed)
        self.trunk = mlp(2 * self.points + embed * residues + 32, hidden, hidden)
        self.structure_head = nn.Linear(hidden, 2 * self.points)
        self.sequence_head = nn.Linear(hidden, vocab * residues)

    def forward(self, coords: torch.Tensor, seq: torch.Tensor, t_struct: torch.Tensor,
                t_seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.cat([coords.flatten(1), self.tokens(seq).flatten(1), time_embedding(t_struct),
                              time_embedding(t_seq)], dim=1)
        hidden = torch.nn.functional.silu(self.trunk(features))
        clean = self.structure_head(hidden).view(-1, self.points, 2)
        return clean, self.sequence_head(hidden).view(-1, self.residues, self.vocab)
