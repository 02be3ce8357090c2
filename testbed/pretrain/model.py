"""A small GPT-style decoder in torch, with a document mask for packed sequences.

Pre-norm transformer blocks (LayerNorm, multi-head self-attention, GELU MLP), rotary position
embeddings (RoPE), and an output layer tied to the token embedding. Positions are *not* reset at
document boundaries, as in Ding et al. (ICML 2024, section 4): RoPE is relative, so a document
attending only to itself computes the same wherever it sits in the sequence.

Attention is PyTorch's ``scaled_dot_product_attention``: plain causal when no document ids are
given (the concatenation baseline), otherwise with the block-diagonal causal mask of
`testbed.pretrain.attention.document_causal_mask` as a dense boolean mask. (FlexAttention with a
document ``mask_mod`` gives the same numbers, but torch 2.13 has no FlexAttention backward pass on
CPU, and its eager forward is about 18x slower there than the dense mask at these sizes.)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from testbed.pretrain.attention import document_causal_mask
from testbed.pretrain.config import ModelConfig

ROPE_BASE = 10_000.0
IGNORE_INDEX = -100


def rotary_tables(length: int, head_dim: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles, (length, head_dim / 2) each: position * base^(-2i / head_dim)."""
    inverse_frequency = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * inverse_frequency[None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_2i, x_2i+1) of ``x`` (..., T, head_dim) by its position's angle."""
    even, odd = x[..., 0::2], x[..., 1::2]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class SelfAttention(nn.Module):
    """Multi-head causal self-attention with rotary positions and an optional document mask."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, d_model: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(),
                                 nn.Linear(mlp_ratio * d_model, d_model))

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rotary, mask)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """Decoder-only language model: token ids (B, T) -> next-token logits (B, T, vocab)."""

    def __init__(self, config: ModelConfig, vocab_size: int, context_length: int):
        super().__init__()
        self.context_length = context_length
        self.head_dim = config.d_model // config.heads
        self.embedding = nn.Embedding(vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config.d_model, config.heads, config.mlp_ratio) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self._init_weights(config.layers)

    def _init_weights(self, layers: int) -> None:
        # GPT-2's scheme: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers).
        for name, parameter in self.named_parameters():
            if parameter.dim() < 2:
                continue
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("out.weight", "mlp.2.weight")) else 0.02
            nn.init.normal_(parameter, 0.0, std)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for every position; ``document_ids`` (B, T) (-1 on padding) turns on the document mask."""
        length = tokens.shape[1]
        rotary = rotary_tables(length, self.head_dim, tokens.device)
        mask = None if document_ids is None else document_causal_mask(document_ids).unsqueeze(1)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, rotary, mask)
        return self.final_norm(x) @ self.embedding.weight.T


def next_token_labels(tokens: torch.Tensor, document_ids: torch.Tensor) -> torch.Tensor:
    """Targets for next-token prediction: position i predicts token i+1 of the same document.

    The last position of a document (and every padding position) gets IGNORE_INDEX, so no method
    trains a prediction across a document boundary and padding never enters the loss.
    """
    labels = torch.full_like(tokens, IGNORE_INDEX)
    same_document = (document_ids[:, 1:] == document_ids[:, :-1]) & (document_ids[:, :-1] >= 0)
    labels[:, :-1] = torch.where(same_document, tokens[:, 1:], IGNORE_INDEX)
    return labels


def summed_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy summed over the positions that have a label."""
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices only (not on biases, norms or the embedding)."""
    decayed = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith("embedding")]
    others = [p for n, p in model.named_parameters() if p.dim() < 2 or n.startswith("embedding")]
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
