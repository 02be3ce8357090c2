"""Post-training W8A8 quantization, simulated with fake quantization in torch (CPU or GPU).

The scheme of OutEffHop's evaluation (inherited from Bondarenko et al. 2023, "Quantizable
Transformers"), per tensor:

  weights      symmetric uniform, range from the tensor's current min-max:
               w_q = clamp(round(w / s), -2^(b-1), 2^(b-1) - 1) * s,   s = max|w| / (2^(b-1) - 1);
  activations  asymmetric uniform over [lo, hi], a running min-max (momentum 0.9) estimated on
               calibration batches, always containing 0: s = (hi - lo) / (2^b - 1), z = round(-lo / s).

Two range setters of the OPT evaluation (``validate_clm.py``: ``--percentile 99.999`` and MSE
weight ranges) are offered beside these, by ``pretrain.outliers``:

  weight_range: mse            s = c / (2^(b-1) - 1) with c = argmin over c = max|w| * k / 100,
                               k = 1..100, of sum (w - w_q(c))^2 (a grid search of the clipping range);
  activation_range: percentile lo, hi = the (100 - p)-th and p-th percentiles of each calibration
                               batch (p = 99.999 by default), averaged with the same momentum.

Every ``nn.Linear`` weight is quantized. Activations are quantized at the outputs of the
embedding, every linear layer, LayerNorm and GELU, the attention weights (the softmax output,
through ``SelfAttention.weights`` / ``HopfieldLayer.weights``) and both residual sums of each
block (``Block.attention_residual``, ``Block.mlp_residual``: in a pre-norm block the second is
the block's output; in a post-norm block both are the inputs of its LayerNorms, whose outputs,
the block's output among them, are quantized as LayerNorm outputs). The token embedding table
stays in full precision: it is also the tied output layer, which the paper keeps in FP32
(``fp32_head``); its lookups are quantized as activations.
Quantize/dequantize is ``torch.fake_quantize_per_tensor_affine``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from testbed.pretrain.hopfield import HopfieldLayer
from testbed.pretrain.model import Block, SelfAttention

MOMENTUM = 0.9
ACTIVATION_TYPES = (nn.Embedding, nn.Linear, nn.LayerNorm, nn.GELU)


MSE_GRID = 100


def quantize_weight(weight: torch.Tensor, bits: int, weight_range: str = "minmax") -> torch.Tensor:
    """Symmetric per-tensor fake quantization with the current min-max range, or (``mse``) the
    clipping range of least squared error on a grid of 100 fractions of it."""
    levels = 2 ** (bits - 1) - 1
    peak = float(weight.abs().max()) or 1.0
    candidates = [peak] if weight_range == "minmax" else [peak * k / MSE_GRID for k in range(1, MSE_GRID + 1)]
    best, best_error = weight, float("inf")
    for clip in candidates:
        quantized = torch.fake_quantize_per_tensor_affine(weight, clip / levels, 0, -levels - 1, levels)
        error = float((quantized - weight).pow(2).sum())
        if error < best_error:
            best, best_error = quantized, error
    return best


def percentile_range(x: torch.Tensor, percentile: float) -> tuple[float, float]:
    """The (100 - p)-th and p-th percentiles of all values of ``x`` (nearest rank)."""
    flat = x.detach().flatten().float()
    rank = max(1, min(len(flat), round(percentile / 100 * len(flat))))
    high = float(flat.kthvalue(rank).values)
    low = float(flat.kthvalue(max(1, len(flat) + 1 - rank)).values)
    return low, high


class ActivationQuantizer:
    """Running range of one activation tensor (min-max or percentiles per batch, averaged with
    momentum), then asymmetric fake quantization to it."""

    def __init__(self, bits: int, percentile: float | None = None):
        self.bits = bits
        self.percentile = percentile
        self.low: float | None = None
        self.high: float | None = None
        self.calibrating = True

    def observe(self, x: torch.Tensor) -> None:
        if self.percentile is None:
            low, high = float(x.min()), float(x.max())
        else:
            low, high = percentile_range(x, self.percentile)
        if self.low is None or self.high is None:  # set together
            self.low, self.high = low, high
        else:
            self.low = MOMENTUM * self.low + (1 - MOMENTUM) * low
            self.high = MOMENTUM * self.high + (1 - MOMENTUM) * high

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.calibrating:
            self.observe(x)
            return x
        assert self.low is not None and self.high is not None  # observed while calibrating
        low, high = min(self.low, 0.0), max(self.high, 0.0)
        levels = 2**self.bits - 1
        scale = (high - low) / levels or 1.0
        zero_point = int(min(max(round(-low / scale), 0), levels))
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, 0, levels)


def activation_points(model: nn.Module) -> dict[str, nn.Module]:
    """The modules whose outputs are quantized, by name."""
    points: dict[str, nn.Module] = {name: module for name, module in model.named_modules()
                                    if isinstance(module, ACTIVATION_TYPES)}
    for name, module in model.named_modules():
        if isinstance(module, SelfAttention | HopfieldLayer):
            points[f"{name}.weights"] = module.weights
        if isinstance(module, Block):
            points[f"{name}.attention_residual"] = module.attention_residual
            points[f"{name}.mlp_residual"] = module.mlp_residual
    return points


class QuantizedModel:
    """A W8A8 copy of a trained model: call it like the model; `calibrate` must run first.

    ``weight_range`` is ``minmax`` or ``mse``; ``percentile`` (None: running min-max) sets the
    activation ranges from per-batch percentiles."""

    def __init__(self, model: nn.Module, weight_bits: int = 8, activation_bits: int = 8,
                 weight_range: str = "minmax", percentile: float | None = None):
        self.model = copy.deepcopy(model).eval()
        with torch.no_grad():
            for module in self.model.modules():
                if isinstance(module, nn.Linear):
                    module.weight.copy_(quantize_weight(module.weight, weight_bits, weight_range))
                if isinstance(module, SelfAttention):
                    module.fused = False  # the explicit path exposes the attention weights to quantize
        self.quantizers = {name: ActivationQuantizer(activation_bits, percentile)
                           for name in activation_points(self.model)}
        for name, module in activation_points(self.model).items():
            module.register_forward_hook(lambda _m, _i, out, q=self.quantizers[name]: q(out))

    @torch.no_grad()
    def calibrate(self, inputs: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> QuantizedModel:
        """Estimate every activation range on these (tokens, document_ids) batches, then freeze them."""
        for tokens, document_ids in inputs:
            self.model(tokens, document_ids)
        for quantizer in self.quantizers.values():
            if quantizer.low is None:
                raise RuntimeError("an activation was never seen during calibration")
            quantizer.calibrating = False
        return self

    def __call__(self, tokens: torch.Tensor, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(tokens, document_ids)

