"""Workload ``gridcoarsen``: differentiable coarsening of an unstructured grid (Shumilin et al.).

The data are synthetic (a random fine grid with a sinusoidal permeability field; ``data.dataset``
is ignored). For every equation in ``equations`` and every reduction factor r in ``reductions``
the workload builds a coarse grid of N_fine / r points by ``variant``:

- ``optimised``: the k-means grid, then each training step is one Adam iteration on its free point
  coordinates through the differentiable geometry and the whole solver rollout (the method);
- ``kmeans``: the k-means grid as it is (baseline; training steps leave it unchanged);
- ``random``: a random subsample of the fine points (baseline; unchanged too).

Metrics per equation e and reduction r: ``test_<e>_rmse_x<r>`` (the paper's loss: mean over
sensors of the RMSE over time), ``test_<e>_rel_l2_x<r>``, ``test_<e>_ratio_x<r>`` (error over the
k-means grid's error) and ``<e>_substeps_x<r>`` (1 = stable at the fine output interval). The
headline ``test_worst_ratio`` is the largest ratio at the largest reduction over the equations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.gridcoarsen.coarsening import CoarseModel, sensor_rmse
from testbed.workloads.gridcoarsen.config import Equation, GridCoarsenConfig, Variant, check
from testbed.workloads.gridcoarsen.geometry import geometry
from testbed.workloads.gridcoarsen.problem import Grid, fine_grid, kmeans_grid, random_grid
from testbed.workloads.gridcoarsen.report import CurvesSection, GridSection, ReductionSection
from testbed.workloads.gridcoarsen.solver import Physics, rollout

KINDS: tuple[Variant, ...] = ("optimised", "kmeans", "random")


def physics_for(config: GridCoarsenConfig, equation: Equation) -> Physics:
    """The solver settings of one equation: output interval = simulated time / record_steps."""
    horizon = config.parabolic_time if equation == "parabolic" else config.wave_time
    return Physics(equation, horizon / config.record_steps, config.record_steps,
                   ricker_frequency=config.ricker_frequency, ricker_delay=1.2 / config.ricker_frequency)


class GridCoarsenWorkload(Workload):
    """Coarse grids optimised through the solver rollout, against k-means and random-subsample grids."""

    name = "gridcoarsen"
    Config = GridCoarsenConfig
    config: GridCoarsenConfig
    check = staticmethod(check)
    headline_metric = ("test_worst_ratio", "min")
    report_sections = [ReductionSection(), GridSection(), CurvesSection()]

    def __init__(self, config: GridCoarsenConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.fine = fine_grid(config.side, config.contrast, seeds.numpy("grid.fine"))
        fine_geometry = geometry(self.fine.points)
        self.references = {eq: rollout(fine_geometry, self.fine.permeability, self.fine.wells, self.fine.sensors,
                                       physics_for(config, eq)) for eq in config.equations}
        self.baselines: dict[tuple[Variant, Equation, int], CoarseModel] = {}
        for r in config.reductions:
            size = len(self.fine.points) // r
            grids: dict[Variant, Grid] = {"kmeans": kmeans_grid(self.fine, size, seeds.integer(f"grid.kmeans.{r}")),
                     "random": random_grid(self.fine, size, seeds.numpy(f"grid.random.{r}"))}
            for eq in config.equations:
                for kind, grid in grids.items():
                    self.baselines[kind, eq, r] = self._model(grid, eq)
                self.baselines["optimised", eq, r] = self._model(grids["kmeans"], eq)
        self.steps_done = 0

    def _model(self, grid: Grid, equation: Equation) -> CoarseModel:
        return CoarseModel(grid, physics_for(self.config, equation), self.references[equation], self.config.lr)

    def model(self, equation: Equation, reduction: int, kind: Variant | None = None) -> CoarseModel:
        """The coarse grid of ``kind`` (default: the configured variant) for one equation and reduction."""
        return self.baselines[kind or self.config.variant, equation, reduction]

    def build_model(self) -> nn.Module:
        # The trainable state is the free coordinates of each coarse grid, one parameter per grid.
        models = [self.model(eq, r) for eq in self.config.equations for r in self.config.reductions]
        return nn.ParameterList([nn.Parameter(m.free.detach().clone()) for m in models])

    def train(self, steps: int) -> dict[str, float]:
        if self.config.variant != "optimised":
            self.steps_done += steps
            return {}
        models = [self.model(eq, r) for eq in self.config.equations for r in self.config.reductions]
        total = 0.0
        for _ in range(steps):
            total += sum(m.step() for m in models) / len(models)
        self.steps_done += steps
        return {"train_loss": total / steps}

    def evaluate(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        headline = max(self.config.reductions)
        ratios = []
        for eq in self.config.equations:
            for r in self.config.reductions:
                own = self.model(eq, r).metrics()
                kmeans = self.model(eq, r, "kmeans").metrics()["rmse"]
                metrics.update({f"test_{eq}_rmse_x{r}": own["rmse"], f"test_{eq}_rel_l2_x{r}": own["rel_l2"],
                                f"test_{eq}_ratio_x{r}": own["rmse"] / kmeans, f"{eq}_substeps_x{r}": own["substeps"]})
            ratios.append(metrics[f"test_{eq}_ratio_x{headline}"])
        metrics["test_worst_ratio"] = max(ratios)
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        config = self.config
        headline = max(config.reductions)
        errors = np.array([[[self.model(eq, r, kind).metrics()["rmse"] for r in config.reductions] for kind in KINDS]
                           for eq in config.equations])
        arrays: dict[str, np.ndarray] = {
            "equations": np.array(config.equations), "kinds": np.array(KINDS), "variant": np.array(config.variant),
            "reductions": np.array(config.reductions), "reduction_errors": errors,
            "fine_points": self.fine.points.numpy(), "fine_permeability": self.fine.permeability.numpy(),
            "num_fixed": np.array(self.fine.num_fixed)}
        for eq in config.equations:
            with torch.no_grad():
                curves = [self.model(eq, headline, kind).curves() for kind in KINDS]
            arrays[f"curves_{eq}"] = torch.stack([self.references[eq], *curves]).numpy()
            arrays[f"times_{eq}"] = np.arange(1, config.record_steps + 1) * physics_for(config, eq).dt
            for kind in ("optimised", "kmeans"):
                arrays[f"points_{kind}_{eq}"] = self.model(eq, headline, kind).points().detach().numpy()
        return arrays

    def loss_of(self, equation: Equation, reduction: int, kind: Variant | None = None) -> float:
        """The sensor RMSE of one coarse grid now (convenience for tests and scripts)."""
        model = self.model(equation, reduction, kind)
        with torch.no_grad():
            return float(sensor_rmse(model.curves(), model.reference))

    def state_dict(self) -> dict[str, Any]:
        return {"grids": {f"{eq}/{r}": self.model(eq, r, "optimised").state_dict()
                          for eq in self.config.equations for r in self.config.reductions},
                "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, grid_state in state["grids"].items():
            eq, r = key.split("/")
            self.model(eq, int(r), "optimised").load_state_dict(grid_state)
        self.steps_done = state["steps_done"]
