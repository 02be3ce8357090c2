"""Workload ``aco``: non-greedy active feature acquisition with the acquisition conditioned oracle.

Training fits the arbitrary-subset classifier (`MaskedClassifier`) on random masks; every
evaluation rolls the policies out on test instances with the current classifier: ``policy`` (the
headline, ``test_accuracy``) and the ``baselines``, each reported as ``<policy>_accuracy``,
``<policy>_features`` (mean acquired, the cost) and ``<policy>_objective``. At the end the
policies are rolled out again for every cost in ``cost_grid`` (the accuracy-against-cost curve).

The data come from ``source`` (see `testbed.workloads.aco.data`): the synthetic ``parity`` and
``cube`` sets ignore ``data.dataset`` (only ``data.test_fraction`` is used); ``tabular`` uses it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, field_validator
from torch import nn

from testbed.config import StrictModel
from testbed.data import load_selected
from testbed.errors import ScenarioError
from testbed.scenario import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.aco.data import acquisition_data
from testbed.workloads.aco.evaluation import POLICIES, run_policies, score_masks
from testbed.workloads.aco.masked import MaskedClassifier, train_masked_steps
from testbed.workloads.aco.policy import AcquisitionSettings
from testbed.workloads.aco.report import AccuracyCostSection, FeatureFrequencySection
from testbed.workloads.base import Workload, register
from testbed.workloads.classifier import BatchStream

Policy = Literal["aco", "greedy", "random"]


class ACOConfig(StrictModel):
    """Data source, arbitrary-subset classifier, and the acquisition policies with their estimator."""

    source: Literal["parity", "cube", "tabular"] = "parity"
    num_samples: int = Field(3000, ge=50, description="synthetic sources: instances generated")
    num_features: int = Field(10, ge=2, le=24, description="parity: features in all")
    informative: int = Field(2, ge=2, description="parity: features whose sign parity is the label")
    sigma: float = Field(0.3, gt=0, description="cube: noise of the informative features")
    hidden: int = Field(128, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(128, gt=0)
    policy: Policy = "aco"
    baselines: list[Policy] = Field(default_factory=lambda: ["greedy", "random"])
    cost: float = Field(0.05, ge=0, description="alpha: cost of acquiring one feature")
    neighbours: int = Field(20, gt=0, description="k nearest training instances of the estimator")
    exhaustive_up_to: int = Field(10, ge=0, le=14, description="enumerate all subsets up to this many unobserved")
    random_candidates: int = Field(256, gt=0, description="random candidate subsets beyond that")
    eval_instances: int = Field(200, gt=0)
    cost_grid: list[float] = Field(default_factory=lambda: [0.01, 0.03, 0.1, 0.3])

    @field_validator("cost_grid")
    @classmethod
    def _non_negative_costs(cls, grid: list[float]) -> list[float]:
        if not grid or any(c < 0 for c in grid):
            raise ValueError("needs at least one cost, all non-negative")
        return grid

    @property
    def policies(self) -> list[str]:
        """The headline policy and the baselines, each once, in the canonical order."""
        return [p for p in POLICIES if p == self.policy or p in self.baselines]


@register
class ACOWorkload(Workload):
    """Active feature acquisition: ACO against greedy and random acquisition (accuracy vs cost)."""

    name = "aco"
    Config = ACOConfig
    checkpointed = ("model", "optimizer", "stream", "mask_generator", "steps_done")
    summary = "ACO: non-greedy active feature acquisition from nearest neighbours; aco|greedy|random"
    headline_metric = ("test_accuracy", "max")
    report_sections = [AccuracyCostSection(), FeatureFrequencySection()]

    @classmethod
    def check(cls, config: ACOConfig, data: DataConfig) -> None:
        if config.source == "parity" and config.informative > config.num_features:
            raise ScenarioError(f"workload.informative: {config.informative} informative features need "
                                f"num_features >= {config.informative} (got {config.num_features})")
        if "random" in config.policies and "aco" not in config.policies:
            raise ScenarioError("workload.baselines: 'random' acquires as many features as ACO did on the same "
                                "instance, so 'aco' must be the policy or a baseline")
        if config.source == "tabular" and load_selected(data).image_shape is not None:
            raise ScenarioError(f"workload.source: 'tabular' needs a tabular data.dataset, got image data "
                                f"'{data.dataset}' (use breast_cancer, wine or iris)")

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

    def build_model(self) -> nn.Module:
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
        final = self._rollouts()
        return {
            "policies": np.array(names),
            "curve_cost": np.array(grid),
            "curve_accuracy": np.array([[c[n].accuracy for c in curves] for n in names]),
            "curve_features": np.array([[c[n].mean_features for c in curves] for n in names]),
            "acquired_frequency": np.stack([final[n].masks.mean(axis=0) for n in names]),
        }
