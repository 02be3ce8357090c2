"""Hopfield layers usable as attention replacements: retrieval (`HopfieldLayer`) and pooling (`HopfieldPooling`).

One retrieval step of a modern Hopfield network with stored patterns Y and state patterns R is
attention (Ramsauer et al. 2021); with Softmax_1 in place of softmax it is the OutEffHop retrieval
(Hu et al., ICML 2024, section 3), whose extra zero logit lets a state retrieve "nothing":

    Q = R W_Q,   K = Y W_K,   V = K W_V,
    Z = Softmax_1(beta Q K^T) V W_O,        beta = 1 / sqrt(d_head) by default.

The value projection acts on the projected keys (V = (Y W_K) W_V), as in Ramsauer's Hopfield
layer: the retrieved vectors are (images of) the stored patterns themselves. With R = Y the layer
is self-attention; `HopfieldPooling` instead retrieves with learned state patterns (queries), so
a set of any size pools into a fixed number of vectors.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from testbed.pretrain.attention import NORMALIZERS, attention


class HopfieldLayer(nn.Module):
    """Multi-head Hopfield retrieval: states (B, T, d) retrieve from stored patterns (B, S, d).

    ``normalizer`` is a key of `testbed.pretrain.attention.NORMALIZERS` (``softmax_1``:
    OutEffHop; ``softmax``: the classic modern Hopfield layer). ``beta`` defaults to 1/sqrt(d_head).
    """

    def __init__(self, d_model: int, heads: int = 1, normalizer: str = "softmax_1", beta: float | None = None):
        super().__init__()
        if normalizer not in NORMALIZERS:
            raise ValueError(f"unknown normalizer {normalizer!r}; expected one of {sorted(NORMALIZERS)}")
        self.heads, self.normalizer = heads, normalizer
        head_dim = d_model // heads
        # attention() scales the logits by 1/sqrt(d_head); fold the rest of beta into the queries.
        self.query_scale = (beta if beta is not None else 1.0 / math.sqrt(head_dim)) * math.sqrt(head_dim)
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.weights = nn.Identity()  # the retrieval weights: a hook point, as in SelfAttention

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.heads, -1).transpose(-3, -2)

    def forward(self, states: torch.Tensor, stored: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Retrieved patterns (B, T, d); ``mask`` (B, 1, T, S) or broadcastable, True where allowed."""
        keys = self.key(stored)
        q = self._heads(self.query(states) * self.query_scale)
        k, v = self._heads(keys), self._heads(self.value(keys))
        z = attention(q, k, v, mask, kind=self.normalizer, observe_weights=self.weights)
        return self.out(z.transpose(-3, -2).flatten(-2))


class HopfieldPooling(nn.Module):
    """Pool a set (B, S, d) into (B, queries, d): learned state patterns retrieve from the set."""

    def __init__(self, d_model: int, heads: int = 1, queries: int = 1, normalizer: str = "softmax_1",
                 beta: float | None = None):
        super().__init__()
        self.state_patterns = nn.Parameter(torch.randn(queries, d_model) * 0.02)
        self.retrieval = HopfieldLayer(d_model, heads, normalizer, beta)

    def forward(self, stored: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        states = self.state_patterns.expand(stored.shape[0], -1, -1)
        return self.retrieval(states, stored, mask)
