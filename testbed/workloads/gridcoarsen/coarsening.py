"""Self-supervised coarsening: move the free coarse points so the coarse solver's sensor curves match the fine ones.

One `CoarseModel` is one coarse grid for one equation. Each Adam iteration re-triangulates the
current points (topology without gradient), rebuilds the differentiable geometry, rolls the coarse
solver out, takes the loss (mean over sensors of the RMSE over time against the fine curves) and
back-propagates through the whole rollout to the free coordinates; the source and sensors are
fixed, and the free points are clamped to the square after the step.
"""

from __future__ import annotations

from typing import Any

import torch

from testbed.workloads.gridcoarsen.geometry import geometry
from testbed.workloads.gridcoarsen.problem import Grid
from testbed.workloads.gridcoarsen.solver import Physics, rollout, substeps_needed
from testbed.workloads.training import optimizer_step

# Keeps points off the boundary, where a point and its mirror would coincide.
_MARGIN = 1e-3


def sensor_rmse(curves: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The paper's loss and metric: mean over sensors of the RMSE over time (curves are steps x sensors)."""
    return torch.sqrt(((curves - reference) ** 2).mean(0)).mean()


def relative_l2(curves: torch.Tensor, reference: torch.Tensor) -> float:
    """||coarse - fine|| / ||fine|| over all sensors and times."""
    return float(torch.linalg.norm(curves - reference) / torch.linalg.norm(reference))


class CoarseModel:
    """A coarse grid whose free points are optimised (or left as they are, for the baselines)."""

    def __init__(self, grid: Grid, physics: Physics, reference: torch.Tensor, lr: float):
        self.grid = grid
        self.physics = physics
        self.reference = reference
        self.free = grid.points[:grid.num_free].clone().requires_grad_(True)
        self.optimizer = torch.optim.Adam([self.free], lr=lr)

    def points(self) -> torch.Tensor:
        """The current coordinates: the free points, then the fixed source and sensors."""
        return torch.cat([self.free, self.grid.points[self.grid.num_free:]])

    def curves(self) -> torch.Tensor:
        """Sensor curves of the coarse solver on the current points (steps x sensors)."""
        grid = self.grid
        return rollout(geometry(self.points()), grid.permeability, grid.wells, grid.sensors, self.physics)

    def step(self) -> float:
        """One Adam iteration on the free coordinates; returns the loss before the step."""
        loss = optimizer_step(self.optimizer, sensor_rmse(self.curves(), self.reference))
        with torch.no_grad():
            self.free.clamp_(_MARGIN, 1 - _MARGIN)
        return loss

    def metrics(self) -> dict[str, float]:
        """Sensor RMSE, relative L2 and the substeps the grid needs at the output interval."""
        with torch.no_grad():
            curves = self.curves()
            points = self.points()
        return {"rmse": float(sensor_rmse(curves, self.reference)), "rel_l2": relative_l2(curves, self.reference),
                "substeps": float(substeps_needed(geometry(points), self.grid.permeability, self.physics))}

    def state_dict(self) -> dict[str, Any]:
        return {"free": self.free.detach().clone(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.free.copy_(state["free"])
        self.optimizer.load_state_dict(state["optimizer"])
