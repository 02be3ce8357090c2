"""The attention sink, per layer: how much attention goes to each document's first token, and how
large that token's residual state grows (Guo et al. 2024; Bondarenko et al. 2023, section 3).

For a query at position q of document D (not D's first position, which can attend only to
itself under a causal mask), the *sink mass* is the attention weight it puts on D's first
token, averaged over heads and queries:

    sink_mass = mean_{b, h, q} A[b, h, q, start(q)],

where A is the attention weight matrix after the normalizer (softmax, Softmax_1, clipped softmax;
before the gate of gated attention). With ``pretrain.corpus.bos`` (or the bigram_backcopy task)
the first token is the BOS token; a head that "does nothing" with softmax parks its weight
there, a Softmax_1 head can spread less than 1 over all keys. The *sink norm* is the L2 norm of
the block output (the residual state) at first positions, beside the mean norm at the others.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

FIELDS = ("mass", "queries", "sink_norm", "sinks", "other_norm", "others")


def document_starts(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T): the position of each position's document's first token (-1 on padding)."""
    positions = torch.arange(document_ids.shape[-1], device=document_ids.device).expand_as(document_ids)
    changed = torch.ones_like(document_ids, dtype=torch.bool)
    changed[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    starts = torch.where(changed, positions, torch.zeros_like(positions)).cummax(dim=1).values
    return torch.where(document_ids >= 0, starts, -1)


def sink_weights(weights: torch.Tensor, document_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight each query puts on its document's first token, (B, H, T), and the (B, T) mask of
    the queries that count (in a document, not its first position)."""
    starts = document_starts(document_ids)
    index = starts.clamp(min=0)[:, None, :, None].expand(*weights.shape[:-1], 1)
    positions = torch.arange(document_ids.shape[-1], device=document_ids.device)
    counted = (starts >= 0) & (starts != positions)
    return weights.gather(-1, index).squeeze(-1), counted


class SinkMeter:
    """Per-layer sums of the sink mass and the residual norms at first and other positions."""

    def __init__(self, layers: int):
        self.sums = np.zeros((layers, len(FIELDS)))

    def add_weights(self, layer: int, weights: torch.Tensor, document_ids: torch.Tensor) -> None:
        """Add one layer's attention weights (B, H, T, T) of a batch with these document ids."""
        on_sink, counted = sink_weights(weights.detach().float(), document_ids)
        self.sums[layer, 0] += float(on_sink.mean(dim=1)[counted].sum())
        self.sums[layer, 1] += float(counted.sum())

    def add_residual(self, layer: int, output: torch.Tensor, document_ids: torch.Tensor) -> None:
        """Add one block's output (B, T, d): L2 norms at first positions and at the others."""
        norms = output.detach().float().norm(dim=-1)
        starts = document_starts(document_ids)
        positions = torch.arange(document_ids.shape[-1], device=document_ids.device)
        sink, other = starts == positions, (starts >= 0) & (starts != positions)
        self.sums[layer, 2:] += (float(norms[sink].sum()), float(sink.sum()),
                                 float(norms[other].sum()), float(other.sum()))

    def all_reduce(self, device: torch.device) -> None:
        """Sum over all processes."""
        if dist.is_initialized() and dist.get_world_size() > 1:
            flat = torch.tensor(self.sums, dtype=torch.float64, device=device)
            dist.all_reduce(flat)
            self.sums = flat.cpu().numpy()

    def per_layer(self) -> dict[str, dict[str, float]]:
        """``layer{j}``: mass (mean sink weight), sink_norm and other_norm (mean residual norms)."""
        def ratio(a: float, b: float) -> float:
            return float(a / b) if b else float("nan")
        return {f"layer{j}": {"mass": ratio(s[0], s[1]), "sink_norm": ratio(s[2], s[3]),
                              "other_norm": ratio(s[4], s[5])} for j, s in enumerate(self.sums)}

    def summary(self) -> dict[str, float]:
        """``sink_mass``: the largest layer's mean sink weight; ``sink_norm_ratio``: the largest
        layer's sink residual norm over its other tokens' mean norm."""
        layers = self.per_layer().values()
        masses = [s["mass"] for s in layers if s["mass"] == s["mass"]]
        ratios = [s["sink_norm"] / s["other_norm"] for s in layers if s["other_norm"] > 0 and s["sink_norm"] > 0]
        return {"sink_mass": max(masses, default=float("nan")),
                "sink_norm_ratio": max(ratios, default=float("nan"))}
