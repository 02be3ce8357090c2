"""Outlier-efficient attention: Softmax_1, OutEffHop retrieval, and attention with a document mask.

Softmax_1 (Miller 2023, "Attention Is Off By One"; Hu et al., ICML 2024, OutEffHop) adds an
implicit zero logit to the softmax:

    Softmax_1(x)_i = exp(x_i) / (1 + sum_j exp(x_j)) = softmax([x, 0])_i   (i < n),

so the weights sum to less than 1 and a head can "attend to nothing" instead of dumping its
probability mass on a delimiter token, the source of activation outliers that hurt quantization.

OutEffHop reads Softmax_1 as the retrieval step of a modern Hopfield model whose energy has an
extra zero term (working form from the project reference notes; the paper's exact "no-op dimension"
construction was not retrieved):

    E(x) = -(1/beta) log(1 + sum_mu exp(beta <xi_mu, x>)) + 1/2 <x, x>,
    T(x) = Xi^T Softmax_1(beta Xi x)   (rows of Xi are the stored patterns xi_mu).

T is the concave-convex procedure step for E, so E never increases along the iterates.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

Normalizer = Callable[..., torch.Tensor]


class _Softmax1(torch.autograd.Function):
    """Softmax_1 with softmax's own backward: its Jacobian is diag(y) - y y^T, as softmax's is."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int) -> torch.Tensor:
        # With m = max(max_j x_j, 0) no exponent is positive, and the subtraction is exact to the
        # last bit for the largest logit; a row of -inf logits (fully masked) gives 0, not NaN.
        shift = x.amax(dim=dim, keepdim=True).clamp(min=0.0)
        exp_shifted = torch.exp(x - shift)
        output = exp_shifted / (torch.exp(-shift) + exp_shifted.sum(dim=dim, keepdim=True))
        ctx.save_for_backward(output)
        ctx.dim = dim
        return output

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (output,) = ctx.saved_tensors
        return output * (grad - (grad * output).sum(dim=ctx.dim, keepdim=True)), None


def softmax_1(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax with an extra zero logit: exp(x_i) / (1 + sum_j exp(x_j)) along `dim`.

    Evaluated as exp(x_i - m) / (exp(-m) + sum_j exp(x_j - m)) with m = max(max_j x_j, 0), stable
    for large logits of either sign. The backward pass is y * (g - <g, y>), the closed form of
    softmax's (dy_i/dx_j = y_i (d_ij - y_j) holds for Softmax_1 too), so it saves one tensor and
    builds no autograd graph.
    """
    return _Softmax1.apply(x, dim)


def clipped_softmax(
    x: torch.Tensor, dim: int = -1, gamma: float = -0.025, zeta: float = 1.0, base: Normalizer = torch.softmax
) -> torch.Tensor:
    """Clipped softmax of Bondarenko et al. (NeurIPS 2023): clip((zeta - gamma) * p + gamma, 0, 1).

    With gamma < 0, small probabilities are clipped to exactly 0. `base=softmax_1` gives the
    "clipped OutEffHop" variant.
    """
    return torch.clamp((zeta - gamma) * base(x, dim=dim) + gamma, 0.0, 1.0)


NORMALIZERS: dict[str, Normalizer] = {
    "softmax": torch.softmax,
    "softmax_1": softmax_1,
    "clipped": clipped_softmax,
    "clipped_softmax_1": lambda x, dim=-1: clipped_softmax(x, dim=dim, base=softmax_1),
}


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    kind: str = "softmax",
    gate_logits: torch.Tensor | None = None,
    observe_weights: Callable[[torch.Tensor], torch.Tensor] | None = None,
    normalizer: Normalizer | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention, normalizer(q k^T / sqrt(d)) v, with a chosen normalizer.

    q: (..., T, d), k: (..., S, d), v: (..., S, d_v). `mask` is boolean, broadcastable to
    (..., T, S), True where a query may attend. `kind` is a key of NORMALIZERS (`normalizer`, when
    given, replaces it, e.g. a clipped softmax with other gamma/zeta). `gate_logits` (..., T, 1)
    turns it into gated attention (Bondarenko et al.): output * sigmoid(gate_logits).
    `observe_weights` sees (and may replace) the attention weights, e.g. to quantize them.
    """
    if kind not in NORMALIZERS:
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {sorted(NORMALIZERS)}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = (normalizer or NORMALIZERS[kind])(scores, dim=-1)
    if observe_weights is not None:
        weights = observe_weights(weights)
    output = weights @ v
    if gate_logits is not None:
        output = output * torch.sigmoid(gate_logits)
    return output


def no_op_key_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """Softmax_1 attention through PyTorch's fused scaled_dot_product_attention.

    Softmax_1(s) = softmax([0, s])[1:], so prepending one key whose logit is always 0 (a zero
    key vector) with a zero value vector gives exactly Softmax_1 attention (the "no-op token" of
    OutEffHop) while the fused kernel does the work. `mask` (..., T, S) gains an always-open
    first column. Without a mask, `causal` keeps the kernel's causal fast path: a zero query is
    prepended too, so that real query i sees the no-op key and keys 0..i, and its output dropped.
    """
    k, v = F.pad(k, (0, 0, 1, 0)), F.pad(v, (0, 0, 1, 0))
    if mask is None and causal:
        return F.scaled_dot_product_attention(F.pad(q, (0, 0, 1, 0)), k, v, is_causal=True)[..., 1:, :]
    if mask is not None:
        mask = F.pad(mask, (1, 0), value=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def document_mask(position_doc_ids: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Block-diagonal mask (..., T, T) from per-position document ids (..., T).

    Position i may attend to j iff both belong to the same document (and j <= i when `causal`).
    Padding positions (id -1) attend only to themselves, which keeps every row non-empty so that
    plain softmax stays finite; their outputs are meant to be loss-masked.
    """
    length = position_doc_ids.shape[-1]
    same_doc = position_doc_ids.unsqueeze(-1) == position_doc_ids.unsqueeze(-2)
    not_pad = (position_doc_ids >= 0).unsqueeze(-1) & (position_doc_ids >= 0).unsqueeze(-2)
    allowed = same_doc & not_pad
    if causal:
        allowed = allowed & torch.ones(length, length, dtype=torch.bool, device=position_doc_ids.device).tril()
    return allowed | torch.eye(length, dtype=torch.bool, device=position_doc_ids.device)


def document_causal_mask(position_doc_ids: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask (..., T, T): `document_mask` with ``causal=True``."""
    return document_mask(position_doc_ids, causal=True)


def hopfield_retrieve(
    query: torch.Tensor,
    memories: torch.Tensor,
    beta: float,
    steps: int = 1,
    normalizer: Normalizer = softmax_1,
) -> torch.Tensor:
    """Iterate the modern Hopfield update xi <- Xi^T normalizer(beta Xi xi) `steps` times.

    query: (..., d) states; memories: (M, d), one stored pattern per row. With the default
    Softmax_1 this is OutEffHop retrieval; `normalizer=torch.softmax` gives the classic modern
    Hopfield update of Ramsauer et al. (2021). A state unlike every pattern is sent towards 0
    by Softmax_1 (a "no-op" retrieval) but to a mixture of patterns by softmax.
    """
    state = query
    for _ in range(steps):
        state = normalizer(beta * state @ memories.transpose(-2, -1), dim=-1) @ memories
    return state


def outeffhop_energy(state: torch.Tensor, memories: torch.Tensor, beta: float) -> torch.Tensor:
    """E(x) = -(1/beta) log(1 + sum_mu exp(beta <xi_mu, x>)) + 1/2 <x, x>, per state (...,).

    The log-sum-exp includes the zero logit, which is what makes the update rule Softmax_1.
    """
    scores = beta * state @ memories.transpose(-2, -1)
    zero_logit = torch.zeros_like(scores[..., :1])
    log_partition = torch.logsumexp(torch.cat([zero_logit, scores], dim=-1), dim=-1)
    return -log_partition / beta + 0.5 * (state * state).sum(dim=-1)
