"""Autoregressive rollout, the paper's loss, and its metrics (RMSE, NSE, CSI at two horizons).

Loss (Eqs. 11-13): per step, mean over nodes of |d| where |d| < 1 else d^2 (d = prediction -
truth), plus mean of max(0, -h) (no negative depth), summed over the rollout (averaged here).
Metrics are taken in the transformed space, as the paper's code does: RMSE and NSE
(1 - SSE / sum of squares about the mean) at a step, and CSI = hits / (hits + misses + false
alarms) of the wet cells (depth above 0.001 m and 0.01 m).
"""

from __future__ import annotations

import torch

from testbed.workloads.floodgnn.data import Batch, transform
from testbed.workloads.floodgnn.models import FloodModel

CSI_THRESHOLDS_M = {"001": 0.001, "01": 0.01}


def rollout(model: FloodModel, batch: Batch, steps: int) -> torch.Tensor:
    """Predicted transformed depth after each of ``steps`` steps from a dry start (steps x nodes)."""
    depth = torch.zeros_like(batch.elevation, dtype=torch.float32)
    q = model.initial_flux(batch.edges)
    elevation = batch.elevation.float()
    predictions = []
    for t in range(steps):
        depth, q = model(batch.rain[t].float(), depth, elevation, q, batch.edges)
        predictions.append(depth)
    return torch.stack(predictions)


def flood_loss(predicted: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """The paper's loss: the L1-then-quadratic error plus the negative-depth penalty, mean over steps."""
    error = predicted - truth
    magnitude = error.abs()
    per_node = torch.where(magnitude < 1, magnitude, error ** 2)
    return (per_node.mean(1) + torch.relu(-predicted).mean(1)).mean()


def metrics_at(predicted: torch.Tensor, truth: torch.Tensor, horizons: list[int], prefix: str) -> dict[str, float]:
    """RMSE, NSE and CSI at each horizon (1-based step) of transformed depths (steps x nodes)."""
    results: dict[str, float] = {}
    for horizon in horizons:
        guess, real = predicted[horizon - 1].double(), truth[horizon - 1].double()
        squared = ((guess - real) ** 2).sum()
        results[f"{prefix}rmse_t{horizon}"] = float(torch.sqrt(squared / len(real)))
        results[f"{prefix}nse_t{horizon}"] = float(1 - squared / ((real - real.mean()) ** 2).sum().clamp_min(1e-12))
        for name, threshold in CSI_THRESHOLDS_M.items():
            level = float(transform(torch.tensor(threshold)))
            wet, said_wet = real > level, guess > level
            hits = (wet & said_wet).sum()
            union = (wet | said_wet).sum()
            results[f"{prefix}csi{name}_t{horizon}"] = float(hits / union) if union > 0 else 1.0
    return results


def rmse_per_step(predicted: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """RMSE over nodes at every step (the rollout's error growth)."""
    return torch.sqrt(((predicted.double() - truth.double()) ** 2).mean(1))
