"""Workload ``aco``: non-greedy active feature acquisition with the acquisition conditioned oracle.

Training fits the arbitrary-subset classifier (`MaskedClassifier`) on random masks; every
evaluation rolls the policies out on test instances with the current classifier: ``policy`` (the
headline, ``test_accuracy``) and the ``baselines``, each reported as ``<policy>_accuracy``,
``<policy>_features`` (mean acquired, the cost) and ``<policy>_objective``. At the end the
policies are rolled out again for every cost in ``cost_grid`` (the accuracy-against-cost curve;
``greedy_budget``, greedy at ACO's per-instance budget, is plotted beside ACO there).

The data come from ``source`` (see `testbed.workloads.aco.data`): the synthetic ``parity`` and
``cube`` sets ignore ``data.dataset`` (only ``data.test_fraction`` is used); ``tabular`` uses it.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.aco.config import ACOConfig, check
from testbed.workloads.aco.data import acquisition_data
from testbed.workloads.aco.masked import MaskedClassifier, train_masked_steps
from testbed.workloads.aco.metrics import run_policies, score_masks
from testbed.workloads.aco.policy import AcquisitionSettings
from testbed.workloads.aco.report import AccuracyCostSection, FeatureFrequencySection
from testbed.workloads.base import Workload
from testbed.workloads.classifier.model import BatchStream


class ACOWorkload(Workload):
    """Active feature acquisition: ACO against greedy and random acquisition (accuracy vs cost)."""

    name = "aco"
    Config = ACOConfig
    config: ACOConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "stream", "mask_generator", "steps_done")
    headline_metric = ("test_accuracy", "max")
    report_sections = [AccuracyCostSection(), FeatureFrequencySection()]

    def __init__(self, config: ACOConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.train_set, self.test_set = acquisition_data(
            config.source, data, config.num_samples, config.num_features, config.informative, config.sigma,
            seeds.numpy("data.generate"), seeds.integer("data.split"))
        torch.manual_seed(seeds.integer("model.init"))
        self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.stream = BatchStream(len(self.train_set.y), min(config.batch_size, len(self.train_set.y)),
                                  seeds.torch("data.batches"))
        self.mask_generator = seeds.torch("train.masks")
        self.steps_done = 0

    def build_model(self) -> MaskedClassifier:
        return MaskedClassifier(self.train_set.x.shape[1], self.train_set.num_classes, self.config.hidden)

    def settings(self, cost: float | None = None) -> AcquisitionSettings:
        """The estimator's settings at the configured cost, or at ``cost``."""
        config = self.config
        return AcquisitionSettings(config.cost if cost is None else cost, config.neighbours,
                                   config.exhaustive_up_to, config.random_candidates)

    def train(self, steps: int) -> dict[str, float]:
        x, y = torch.from_numpy(self.train_set.x), torch.from_numpy(self.train_set.y)
        loss = train_masked_steps(self.model, self.optimizer, x, y, self.stream.next, self.mask_generator, steps)
        self.steps_done += steps
        return {"train_loss": loss}

    def _rollouts(self, cost: float | None = None):
        # A fresh generator per call: evaluations never consume the training streams.
        return run_policies(self.model, self.train_set, self.test_set, self.config.policies, self.settings(cost),
                            self.config.eval_instances, self.seeds.torch("eval.rollouts"))

    def evaluate(self) -> dict[str, float]:
        outcomes = self._rollouts()
        metrics: dict[str, float] = {"test_accuracy": outcomes[self.config.policy].accuracy}
        for name, outcome in outcomes.items():
            metrics.update({f"{name}_accuracy": outcome.accuracy, f"{name}_features": outcome.mean_features,
                            f"{name}_objective": outcome.objective})
        x, y = torch.from_numpy(self.test_set.x), torch.from_numpy(self.test_set.y)
        everything = torch.ones(x.shape, dtype=torch.bool)
        metrics["all_features_accuracy"] = score_masks(self.model, x, y, everything, 0.0)[0]
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        names = self.config.policies
        grid = sorted(self.config.cost_grid)
        curves = [self._rollouts(cost) for cost in grid]
        # A roll-out is deterministic given its cost (a fresh generator per call): reuse the curve's point.
        final = curves[grid.index(self.config.cost)] if self.config.cost in grid else self._rollouts()
        return {
            "policies": np.array(names),
            "curve_cost": np.array(grid),
            "curve_accuracy": np.array([[c[n].accuracy for c in curves] for n in names]),
            "curve_features": np.array([[c[n].mean_features for c in curves] for n in names]),
            "acquired_frequency": np.stack([final[n].masks.mean(axis=0) for n in names]),
        }
