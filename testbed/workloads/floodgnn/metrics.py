"""Autoregressive rollout, the paper's loss, and its metrics (RMSE, NSE, CSI at two horizons).

Loss (Eqs. 11-13): per step, mean over nodes of |d| where |d| < 1 else d^2 (d = prediction -
truth), plus mean of max(0, -h) (no negative depth), summed over the rollout (averaged here).
Metrics are taken in log space as the authors' code does: it multiplies the models' transformed
depth back by 10 before scoring (``train.py``, ``batch.scale`` = 10), so RMSE is in units of
log(1 + h / 1 cm), ten times the models' log(1 + h / 1 cm) / 10. RMSE and NSE (1 - SSE / sum of
squares about the mean) at a step, and CSI = hits / (hits + misses + false alarms) of the wet
cells (depth above 0.001 m and 0.01 m). Beside each CSI, ``csi*_allwet`` is the CSI of the
trivial prediction that every cell is wet (the wet share of the truth): the floor a model must
clear for its CSI to mean anything.
"""

from __future__ import annotations

import torch

from testbed.workloads.floodgnn.data import SCALE_M, Batch
from testbed.workloads.floodgnn.models import FloodModel

CSI_THRESHOLDS_M = {"001": 0.001, "01": 0.01}
METRIC_SCALE = 10.0  # transformed depth x 10 = log(1 + h / 1 cm), the authors' metric space


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


def csi(wet: torch.Tensor, said_wet: torch.Tensor) -> float:
    """Critical success index hits / (hits + misses + false alarms); 1 where neither has a wet cell."""
    union = int((wet | said_wet).sum())
    return float((wet & said_wet).sum()) / union if union > 0 else 1.0


def metrics_at(predicted: torch.Tensor, truth: torch.Tensor, horizons: list[int], prefix: str) -> dict[str, float]:
    """RMSE, NSE, CSI and its all-wet floor at each horizon (1-based step) of transformed depths (steps x nodes)."""
    results: dict[str, float] = {}
    for horizon in horizons:
        guess = METRIC_SCALE * predicted[horizon - 1].double()
        real = METRIC_SCALE * truth[horizon - 1].double()
        squared = ((guess - real) ** 2).sum()
        results[f"{prefix}rmse_t{horizon}"] = float(torch.sqrt(squared / len(real)))
        results[f"{prefix}nse_t{horizon}"] = float(1 - squared / ((real - real.mean()) ** 2).sum().clamp_min(1e-12))
        for name, threshold in CSI_THRESHOLDS_M.items():
            level = float(torch.log1p(torch.tensor(threshold / SCALE_M)))
            wet = real > level
            results[f"{prefix}csi{name}_t{horizon}"] = csi(wet, guess > level)
            results[f"{prefix}csi{name}_allwet_t{horizon}"] = csi(wet, torch.ones_like(wet))
    return results


def rmse_per_step(predicted: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """RMSE over nodes at every step (the rollout's error growth), in log(1 + h / 1 cm) like `metrics_at`."""
    return METRIC_SCALE * torch.sqrt(((predicted.double() - truth.double()) ** 2).mean(1))
