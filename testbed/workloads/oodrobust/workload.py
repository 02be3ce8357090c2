"""Workload ``oodrobust``: train a population of digit classifiers, then benchmark it in and out of distribution.

``training.steps`` are update steps of *every* member (standard, augmented, PGD-AT at several
budgets; see `population`). Each evaluation runs OODRobustBench's protocol on the whole
population (`population_eval`) and writes the paper's numbers: mean clean / ID robust / OOD_d /
OOD_t accuracy, the slope, intercept and R^2 of OOD robustness against ID robustness, the share
of models that lose robustness out of distribution, and effective robustness per training
family. ``variant: id_only`` is the baseline the paper argues against: RobustBench's ID-only
evaluation of the same population. The data is scikit-learn's 8x8 digits (``data.dataset``
must be ``digits``: the corruptions, attack budgets and typeset-digit shift are sized for it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data import load_selected, train_test_split
from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.oodrobust.config import OODRobustConfig, check
from testbed.workloads.oodrobust.population import Member, build_member_model, population_specs
from testbed.workloads.oodrobust.population_eval import evaluate_population
from testbed.workloads.oodrobust.report import OodScatterSection, ShiftTableSection


class OODRobustWorkload(Workload):
    """A zoo of digit classifiers and its ID / OOD robustness benchmark."""

    name = "oodrobust"
    Config = OODRobustConfig
    config: OODRobustConfig
    check = staticmethod(check)
    headline_metric = ("test_fit_d_r2", "max")
    report_sections = [OodScatterSection(), ShiftTableSection()]

    def __init__(self, config: OODRobustConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        self.train_set, self.test_set = train_test_split(load_selected(data), data.test_fraction,
                                                         seeds.integer("data.split"))
        self.specs = population_specs(config.population, config.epsilons, config.widths)
        self.members = [Member(spec, self.train_set, seeds.child(f"member.{i}"), config.lr, config.batch_size,
                               config.at_steps) for i, spec in enumerate(self.specs)]
        self.steps_done = 0
        self._evaluation: tuple[int, dict[str, Any]] | None = None

    def build_model(self) -> torch.nn.Module:
        return build_member_model(self.specs[0], self.train_set.num_features, self.train_set.num_classes)

    def train(self, steps: int) -> dict[str, float]:
        losses = [member.train(steps) for member in self.members]
        self.steps_done += steps
        return {"train_loss": float(np.mean(losses))}

    def _evaluated(self) -> dict[str, Any]:
        """The population benchmark at the current step (computed once per step: it is the costly part)."""
        if self._evaluation is None or self._evaluation[0] != self.steps_done:
            outcome = evaluate_population([m.model for m in self.members], self.specs, self.test_set,
                                          self.config.evaluation, self.seeds.integer("evaluation"),
                                          id_only=self.config.variant == "id_only")
            self._evaluation = (self.steps_done, outcome)
        return self._evaluation[1]

    def evaluate(self) -> dict[str, float]:
        return dict(self._evaluated()["metrics"])

    def artifacts(self) -> dict[str, np.ndarray]:
        return dict(self._evaluated()["arrays"])

    def state_dict(self) -> dict[str, Any]:
        return {"members": [m.state_dict() for m in self.members], "steps_done": self.steps_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for member, member_state in zip(self.members, state["members"], strict=True):
            member.load_state_dict(member_state)
        self.steps_done = state["steps_done"]
