"""Outlier metrics of OutEffHop (Hu et al., ICML 2024) as its evaluation code computes them.

For each hooked module, every evaluation sample's output is flattened to one vector (all its
positions x hidden units) and two statistics are taken per sample:

    kurtosis(x) = mean((x - mean x)^4) / (std(x)^4 + 1e-6)     (std unbiased; plain, ~3 for a Gaussian)
    inf_norm(x) = max_i |x_i|

Each is averaged over the samples (the paper's running means). Over modules:
``avg_kurtosis`` is the mean of the modules' mean kurtosis and ``max_inf_norm`` the max of the
modules' mean infinity norm. A sample's vector holds only its non-padding positions (the
paper's evaluation sequences have no padding; ours are best-fit packed and may).

Hooked modules of a pre-norm model (the OPT hook set of ``validate_clm.py``), per block j:
``layer{j}.attn_norm`` (self_attn_layer_norm), ``layer{j}.attn_out`` (self_attn.out_proj),
``layer{j}.ffn_norm`` (final_layer_norm), ``layer{j}.ffn_out`` (fc2), ``layer{j}.output`` (the
block's output, the residual stream), and ``final_norm``. A post-norm model (``model.norm: post``)
gets the BERT hook set of ``validate_mlm.py``, per block j: ``layer{j}.ffn_out`` (the FFN output,
BERT's ``output.dense``) and ``layer{j}.output`` (the block's output, which is its second
LayerNorm's: BERT's ``output.LayerNorm``); so there its ``avg_kurtosis`` and ``max_inf_norm`` are
the BERT protocol's. Histograms of |activation| over fixed log-spaced bins are collected
alongside, for the report's outlier plots.

Besides the two headline numbers, the FFN outputs and the block outputs are summarised apart
(the BERT protocol of the paper's ``validate_mlm.py`` measures the FFN output, and the LayerNorm
outputs, bounded near sqrt(d) |gamma|, dilute the average over all modules): ``ffn_kurtosis`` and
``block_kurtosis`` are means over layers, ``ffn_inf_norm`` and ``block_inf_norm`` maxima over
layers. The same pass measures the attention sink per layer (`testbed.pretrain.attention_sink`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import cast

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from testbed.pretrain.attention_sink import SinkMeter
from testbed.pretrain.batches import Batch
from testbed.pretrain.model import Block, SelfAttention

# metric name -> submodule of a block ("": the block itself); pre-norm: OPT's, post-norm: BERT's
HOOK_POINTS = {"attn_norm": "attention_norm", "attn_out": "attention.out", "ffn_norm": "mlp_norm",
               "ffn_out": "mlp", "output": ""}
POST_NORM_HOOK_POINTS = {"ffn_out": "mlp", "output": ""}
HISTOGRAM_EDGES = np.logspace(-4, 4, 81)  # |activation| from 1e-4 to 1e4; smaller values fall in bin 0
KURTOSIS_EPS = 1e-6
# summary scalar prefix -> hooked module role, measured apart (mean kurtosis, max inf norm over layers)
ROLE_SUMMARIES = {"ffn": "ffn_out", "block": "output"}


def kurtosis(x: torch.Tensor) -> torch.Tensor:
    """Per-row kurtosis of x (N, D): 4th central moment over (unbiased std)^4 + 1e-6."""
    centered = x - x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, keepdim=True)
    return (centered**4).mean(dim=1, keepdim=True).div(std**4 + KURTOSIS_EPS).squeeze(1)


def hooked_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The measured modules of a model made of ``blocks`` and a ``final_norm``, by metric name: the
    OPT hook set for pre-norm blocks, the BERT hook set for post-norm ones (no final LayerNorm)."""
    modules = {}
    blocks = list(cast(nn.ModuleList, model.blocks))  # the transformer's and the ViT's blocks
    post_norm = any(cast(Block, block).post_norm for block in blocks)
    for j, block in enumerate(blocks):
        for name, path in (POST_NORM_HOOK_POINTS if post_norm else HOOK_POINTS).items():
            modules[f"layer{j}.{name}"] = block.get_submodule(path) if path else block
    if not post_norm:
        modules["final_norm"] = cast(nn.Module, model.final_norm)
    return modules


class OutlierMeter:
    """Per-module sums of per-sample kurtosis and infinity norm, sample counts and |x| histograms."""

    def __init__(self, names: Iterable[str]):
        self.names = list(names)
        self.sums = {name: np.zeros(3) for name in self.names}  # kurtosis, inf norm, samples
        self.histograms = {name: np.zeros(len(HISTOGRAM_EDGES) - 1) for name in self.names}
        self.peaks = {name: 0.0 for name in self.names}
        self.sink = SinkMeter(sum(name.startswith("layer") and name.endswith(".output") for name in self.names))

    def add(self, name: str, output: torch.Tensor, valid: torch.Tensor) -> None:
        """Add the samples of one module output (B, T, hidden) with valid positions (B, T)."""
        output = output.detach().float()
        for row in range(output.shape[0]):
            vector = output[row][valid[row]].flatten()[None, :]
            if vector.shape[1] < 2:
                continue
            self.sums[name] += (float(kurtosis(vector)), float(vector.abs().max()), 1.0)
            magnitudes = vector.abs().clamp(min=HISTOGRAM_EDGES[0]).cpu().numpy()
            self.histograms[name] += np.histogram(magnitudes, bins=HISTOGRAM_EDGES)[0]
            self.peaks[name] = max(self.peaks[name], float(vector.abs().max()))

    def all_reduce(self, device: torch.device) -> None:
        """Sum the sums and histograms, and take the max of the peaks, over all processes."""
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return
        self.sink.all_reduce(device)
        flat = torch.tensor(np.concatenate([np.concatenate([self.sums[n], self.histograms[n]]) for n in self.names]),
                            dtype=torch.float64, device=device)
        dist.all_reduce(flat)
        peaks = torch.tensor([self.peaks[n] for n in self.names], dtype=torch.float64, device=device)
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
        width = 3 + len(HISTOGRAM_EDGES) - 1
        for i, name in enumerate(self.names):
            row = flat[i * width: (i + 1) * width].cpu().numpy()
            self.sums[name], self.histograms[name] = row[:3], row[3:]
            self.peaks[name] = float(peaks[i])

    def per_module(self) -> dict[str, dict[str, float]]:
        """Mean kurtosis and mean infinity norm of each module."""
        return {name: {"kurtosis": float(s[0] / max(s[2], 1.0)), "inf_norm": float(s[1] / max(s[2], 1.0))}
                for name, s in self.sums.items()}

    def summary(self) -> dict[str, float]:
        """The paper's two headline numbers over modules."""
        stats = self.per_module()
        summary = {"avg_kurtosis": float(np.mean([s["kurtosis"] for s in stats.values()])),
                   "max_inf_norm": float(max(s["inf_norm"] for s in stats.values()))}
        for prefix, role in ROLE_SUMMARIES.items():
            chosen = [s for name, s in stats.items() if name.startswith("layer") and name.endswith("." + role)]
            if chosen:
                summary[f"{prefix}_kurtosis"] = float(np.mean([s["kurtosis"] for s in chosen]))
                summary[f"{prefix}_inf_norm"] = float(max(s["inf_norm"] for s in chosen))
        if self.sink.sums[:, 1].sum() > 0:
            summary.update(self.sink.summary())
        return summary


@contextmanager
def recording(model: nn.Module, meter: OutlierMeter, valid: Callable[[], torch.Tensor]):
    """Forward hooks that add each hooked module's output to ``meter``; ``valid()`` gives the
    current batch's valid positions."""
    handles = [module.register_forward_hook(lambda _m, _i, out, name=name: meter.add(name, out, valid()))
               for name, module in hooked_modules(model).items()]
    try:
        yield meter
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def sink_recording(model: nn.Module, meter: SinkMeter, document_ids: Callable[[], torch.Tensor]):
    """Hooks that add each block's attention weights and output to ``meter``. The blocks' attention
    runs its explicit form meanwhile (the fused kernels do not expose the weights; same numbers)."""
    blocks = list(cast(nn.ModuleList, model.blocks))
    attentions = [cast(SelfAttention, block.get_submodule("attention")) for block in blocks]
    handles = []
    for j, (block, attention) in enumerate(zip(blocks, attentions)):
        attention.fused = False
        handles.append(attention.weights.register_forward_hook(
            lambda _m, _i, out, j=j: meter.add_weights(j, out, document_ids())))
        handles.append(block.register_forward_hook(lambda _m, _i, out, j=j: meter.add_residual(j, out, document_ids())))
    try:
        yield meter
    finally:
        for handle in handles:
            handle.remove()
        for attention in attentions:
            attention.fused = True


@torch.no_grad()
def measure_outliers(model: nn.Module, batches: list[Batch | None], placeholder: Batch,
                     device: torch.device) -> OutlierMeter:
    """Outlier statistics of ``model`` over this process's evaluation batches, summed over processes.

    Every process runs as many forward passes as the others (``placeholder`` where it has no
    batch left), as the evaluations of `testbed.pretrain.evaluation` do.
    """
    meter = OutlierMeter(hooked_modules(model))
    current: dict[str, torch.Tensor] = {}
    with recording(model, meter, lambda: current["ids"] >= 0), \
            sink_recording(model, meter.sink, lambda: current["ids"]):
        for batch in batches:
            used = (batch or placeholder).to(device)
            # a placeholder's positions are all padding (-1): it adds nothing
            current["ids"] = used.document_ids if batch is not None else torch.full_like(used.document_ids, -1)
            model(used.tokens, used.document_ids)
    meter.all_reduce(device)
    return meter
