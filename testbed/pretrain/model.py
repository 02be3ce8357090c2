"""A small GPT-style decoder in torch, with a document mask for packed sequences (and, by config, a
BERT-style encoder and the attention variants of OutEffHop and its baselines).

Pre-norm transformer blocks (LayerNorm, multi-head self-attention, GELU MLP; or BERT's post-norm
blocks, ``model.norm: post``), rotary position embeddings (RoPE), and an output layer tied to the
token embedding. Positions are *not* reset at document boundaries, as in Ding et al. (ICML 2024,
section 4): RoPE is relative, so a document attending only to itself computes the same wherever it
sits in the sequence.

Attention is PyTorch's ``scaled_dot_product_attention``: plain causal when no document ids are
given (the concatenation baseline), otherwise with the block-diagonal causal mask of
`testbed.pretrain.attention.document_causal_mask` as a dense boolean mask. (FlexAttention with a
document ``mask_mod`` gives the same numbers, but torch 2.13 has no FlexAttention backward pass on
CPU, and its eager forward is about 18x slower there than the dense mask at these sizes.)
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from testbed.pretrain.attention import attention, clipped_softmax, document_mask, no_op_key_attention, softmax_1
from testbed.pretrain.config import ModelConfig

ROPE_BASE = 10_000.0
IGNORE_INDEX = -100
# attention variant -> (normalizer, gated)
ATTENTION_KINDS = {
    "softmax": ("softmax", False),
    "softmax_1": ("softmax_1", False),
    "clipped_softmax": ("clipped_softmax", False),
    "gated": ("softmax", True),
    "clipped_softmax_1": ("clipped_softmax_1", False),
    "gated_softmax_1": ("softmax_1", True),
}


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


class HeadGate(nn.Module):
    """Gated attention's gate (Bondarenko et al. 2023, "conditional per token"): one logit per
    token and head, a linear map of that head's slice of the attention input; the bias starts
    at logit(gate_init) and the weights at 0, so that every gate first opens to gate_init."""

    def __init__(self, d_model: int, heads: int, gate_init: float):
        super().__init__()
        self.heads = heads
        self.weight = nn.Parameter(torch.zeros(heads, d_model // heads))
        self.bias = nn.Parameter(torch.full((heads,), math.log(gate_init / (1.0 - gate_init))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d_model) -> gate logits (B, heads, T, 1)."""
        slices = x.view(*x.shape[:-1], self.heads, -1)
        return (torch.einsum("bthd,hd->bht", slices, self.weight) + self.bias[:, None]).unsqueeze(-1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with rotary positions, an optional mask and a chosen variant.

    Vanilla softmax (the default) and Softmax_1 run through PyTorch's fused
    ``scaled_dot_product_attention`` (Softmax_1 as a zero "no-op" key, see
    `testbed.pretrain.attention.no_op_key_attention`); clipped softmax, and any variant while
    ``fused`` is False (W8A8 evaluation), compute the weights explicitly and pass them through
    ``weights`` (an identity that quantization hooks).
    """

    def __init__(self, d_model: int, heads: int, config: ModelConfig | None = None, causal: bool = True):
        super().__init__()
        config = config or ModelConfig(d_model=d_model, heads=heads)
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.kind, gated = ATTENTION_KINDS[config.attention]
        self.normalizer = (partial(clipped_softmax, gamma=config.clip_gamma, zeta=config.clip_zeta,
                                   base=softmax_1 if self.kind == "clipped_softmax_1" else torch.softmax)
                           if self.kind.startswith("clipped") else None)
        self.gate = HeadGate(d_model, heads, config.gate_init) if gated else None
        self.weights = nn.Identity()
        self.fused = True

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        y = self._attend(q, k, v, mask)
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(x))
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if self.fused and self.kind == "softmax":
            if mask is None:
                return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if self.fused and self.kind == "softmax_1":
            return no_op_key_attention(q, k, v, mask, causal=self.causal)
        mask_or_causal: torch.Tensor | None
        if mask is None and self.causal:
            mask_or_causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        else:
            mask_or_causal = mask
        kind = "softmax" if self.kind.startswith("clipped") else self.kind
        return attention(q, k, v, mask_or_causal, kind=kind, normalizer=self.normalizer, observe_weights=self.weights)


class Block(nn.Module):
    """Pre-norm (``model.norm: pre``): x + attention(norm(x)), then x + mlp(norm(x)).
    Post-norm (``post``, BERT): x = attention_norm(x + attention(x)), then mlp_norm(x + mlp(x)).

    ``attention_residual`` and ``mlp_residual`` are identities for the numbers; they name the two
    residual sums so that outlier hooks and activation quantizers can reach them (in a pre-norm
    block the second sum is also the block's output).
    """

    def __init__(self, d_model: int, heads: int, mlp_ratio: int, config: ModelConfig | None = None,
                 causal: bool = True):
        super().__init__()
        config = config or ModelConfig(d_model=d_model, heads=heads)
        self.post_norm = config.norm == "post"
        self.attention_norm = nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads, config, causal)
        self.attention_residual = nn.Identity()
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(),
                                 nn.Linear(mlp_ratio * d_model, d_model))
        self.mlp_residual = nn.Identity()

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None) -> torch.Tensor:
        if self.post_norm:
            x = self.attention_norm(self.attention_residual(x + self.attention(x, rotary, mask)))
            return self.mlp_norm(self.mlp_residual(x + self.mlp(x)))
        x = self.attention_residual(x + self.attention(self.attention_norm(x), rotary, mask))
        return self.mlp_residual(x + self.mlp(self.mlp_norm(x)))


def init_transformer_weights(model: nn.Module, layers: int) -> None:
    """GPT-2's scheme: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers), zero biases."""
    for name, parameter in model.named_parameters():
        if parameter.dim() < 2 or name.endswith("gate.weight"):
            continue
        std = 0.02 / math.sqrt(2 * layers) if name.endswith(("out.weight", "mlp.2.weight")) else 0.02
        nn.init.normal_(parameter, 0.0, std)
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


class GPT(nn.Module):
    """Language model over token ids (B, T) -> logits (B, T, vocab).

    ``family: causal_lm`` (the default) is a decoder-only, GPT/OPT-style next-token model;
    ``family: masked_lm`` is the same stack with bidirectional attention, a BERT-style encoder
    for the masked-token objective (`testbed.pretrain.masked_lm`).

    ``norm: pre`` ends in ``final_norm`` (a LayerNorm) before the tied output layer. ``norm: post``
    is BERT's layout: ``embedding_norm`` (BERT's ``embeddings.LayerNorm``) on the token embeddings,
    post-norm blocks, whose last LayerNorm feeds the tied output layer directly (``final_norm`` is
    an identity). BERT's MLM head transform (dense + GELU + LayerNorm) is left out, as in the
    pre-norm model: tried at d_model 64, lr 0.01, it stopped the masked LM from learning.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, context_length: int):
        super().__init__()
        self.context_length = context_length
        self.head_dim = config.d_model // config.heads
        self.causal = config.family != "masked_lm"
        self.embedding = nn.Embedding(vocab_size, config.d_model)
        post = config.norm == "post"
        self.embedding_norm = nn.LayerNorm(config.d_model) if post else nn.Identity()
        self.blocks = nn.ModuleList(Block(config.d_model, config.heads, config.mlp_ratio, config, self.causal)
                                    for _ in range(config.layers))
        self.final_norm = nn.Identity() if post else nn.LayerNorm(config.d_model)
        init_transformer_weights(self, config.layers)

    def forward(self, tokens: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for every position; ``document_ids`` (B, T) (-1 on padding) turns on the document mask."""
        length = tokens.shape[1]
        rotary = rotary_tables(length, self.head_dim, tokens.device)
        mask = None if document_ids is None else document_mask(document_ids, self.causal).unsqueeze(1)
        x = self.embedding_norm(self.embedding(tokens))
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
