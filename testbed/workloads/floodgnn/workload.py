"""Workload ``floodgnn``: pluvial flood emulation with hydraulics-informed message passing (ComGNN).

Data: nine regions cut from matplotlib's bundled real DEM, storms simulated on them with a
local-inertial shallow-water solver (`testbed.workloads.floodgnn.hydraulics`); ``data.dataset`` is
ignored. Each training step is one Adam step on full autoregressive rollouts (``rollout_steps``
steps of ``interval_min`` minutes from a dry start) of every training (region, storm) combination,
with the paper's loss. ``variant`` selects the model:

- ``comgnn``: retention + conservative dispersion on the D8 graph (the method);
- ``mpnn``: a generic message-passing GNN of about the same parameter count (baseline);
- ``rainincr``: h^t = h^{t-1} + alpha p^t, alpha fitted in closed form (baseline; no training).

Storms are local rain cells (``storm_radius``, no background rain unless ``background_rain``),
so dry ground remains at every step. Metrics on held-out regions x held-out storms at each
horizon H: ``test_rmse_tH`` (in log(1 + h / 1 cm), the authors' units), ``test_nse_tH``,
``test_csi001_tH`` and ``test_csi01_tH`` (wet above 1 mm and 1 cm), each CSI beside
``test_csi001_allwet_tH`` / ``test_csi01_allwet_tH``, the CSI of calling every cell wet; the same
over every combination not trained on as ``unseen_*``; Rain-Incr's as ``rainincr_*`` in every run.
The headline ``test_rmse`` is the held-out RMSE at the longest horizon.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.floodgnn.config import FloodGNNConfig, check
from testbed.workloads.floodgnn.data import Batch, FloodData
from testbed.workloads.floodgnn.metrics import flood_loss, metrics_at, rmse_per_step, rollout
from testbed.workloads.floodgnn.models import (
    ComGNN,
    FloodModel,
    RainIncrement,
    fit_rain_increment,
    matched_baseline,
    parameter_count,
)
from testbed.workloads.floodgnn.report import CSIFloorSection, DepthMapSection, ErrorGrowthSection


class FloodGNNWorkload(Workload):
    """ComGNN against a generic GNN and Rain-Incr on held-out regions and storms."""

    name = "floodgnn"
    Config = FloodGNNConfig
    config: FloodGNNConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "steps_done")
    headline_metric = ("test_rmse", "min")
    report_sections = [CSIFloorSection(), ErrorGrowthSection(), DepthMapSection()]
    supports_cuda = True  # the batches and the Rain-Incr reference follow the model (`to_device`)

    def __init__(self, config: FloodGNNConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.data = FloodData(config.region_size, config.relief_scale, config.events, config.rollout_steps,
                              config.interval_min, config.heldout_regions, config.heldout_events,
                              config.train_combos, seeds.numpy("data"), config.storm_radius, config.background_rain)
        self.train_batch = self.data.batch(self.data.train)
        self.heldout_batch = self.data.batch(self.data.heldout)
        self.unseen_batch = self.data.batch(self.data.unseen)
        self.rain_increment = RainIncrement(fit_rain_increment(self.train_batch.rain, self.train_batch.depth))
        torch.manual_seed(seeds.integer("model.init"))
        self.model = self.build_model()
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(trainable, lr=config.lr) if trainable else None
        self.steps_done = 0

    def build_model(self) -> FloodModel:
        config = self.config
        if config.variant == "rainincr":
            return RainIncrement(float(self.rain_increment.alpha))
        reference = ComGNN(config.hidden, config.blocks)
        return reference if config.variant == "comgnn" else matched_baseline(reference, config.blocks)

    def to_device(self, device: torch.device) -> None:
        super().to_device(device)
        self.rain_increment.to(device)
        self.train_batch, self.heldout_batch, self.unseen_batch = (
            batch.to(device) for batch in (self.train_batch, self.heldout_batch, self.unseen_batch))

    def train(self, steps: int) -> dict[str, float]:
        self.steps_done += steps
        if self.optimizer is None:
            return {}
        batch, total = self.train_batch, 0.0
        for _ in range(steps):
            self.optimizer.zero_grad()
            loss = flood_loss(rollout(self.model, batch, self.config.rollout_steps),
                              batch.depth[:self.config.rollout_steps].float())
            loss.backward()
            nn.utils.clip_grad_value_(self.model.parameters(), self.config.grad_clip)
            self.optimizer.step()
            total += float(loss.detach())
        return {"train_loss": total / steps}

    def predict(self, batch: Batch, model: FloodModel | None = None) -> torch.Tensor:
        """Transformed depth rollouts (steps x nodes) of the variant's model, or of ``model``."""
        with torch.no_grad():
            return rollout(model or self.model, batch, self.config.rollout_steps)

    def evaluate(self) -> dict[str, float]:
        steps, horizons = self.config.rollout_steps, self.config.horizons
        metrics: dict[str, float] = {"parameters": float(parameter_count(self.model))}
        for prefix, batch in (("test_", self.heldout_batch), ("unseen_", self.unseen_batch)):
            metrics.update(metrics_at(self.predict(batch), batch.depth[:steps], horizons, prefix))
        reference = self.predict(self.heldout_batch, self.rain_increment)
        metrics.update(metrics_at(reference, self.heldout_batch.depth[:steps], horizons, "rainincr_"))
        metrics["test_rmse"] = metrics[f"test_rmse_t{max(horizons)}"]  # the headline: the longest horizon
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        steps, side = self.config.rollout_steps, self.config.region_size
        batch = self.heldout_batch
        truth, own = batch.depth[:steps].double(), self.predict(batch).double()
        reference = self.predict(batch, self.rain_increment).double()
        first = slice(0, side * side)  # the first held-out combination, for the depth maps
        region, event = batch.combos[0]
        return {"variant": np.array(self.config.variant), "steps": np.arange(1, steps + 1),
                "rmse_curve": rmse_per_step(own, truth).cpu().numpy(),
                "rainincr_rmse_curve": rmse_per_step(reference, truth).cpu().numpy(),
                "combo": np.array([region, event]), "elevation": self.data.crops[region],
                "truth_map": truth[-1, first].reshape(side, side).cpu().numpy(),
                "predicted_map": own[-1, first].reshape(side, side).cpu().numpy(),
                "rainincr_map": reference[-1, first].reshape(side, side).cpu().numpy(),
                "edges": self.data.edges[region].numpy()}
