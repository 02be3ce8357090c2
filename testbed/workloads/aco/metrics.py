"""Roll the acquisition policies out on test instances and score them: accuracy against cost.

The metrics are the paper's: accuracy of the final prediction, the average number of acquired
features (the cost, every feature costing one), and the acquisition objective
``CE(yhat(x_o), y) + alpha |o|`` averaged over the instances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from testbed.data import Dataset
from testbed.workloads.aco.config import MATCHED, POLICIES
from testbed.workloads.aco.masked import MaskedClassifier
from testbed.workloads.aco.policy import (
    AcquisitionSettings,
    NeighbourOracle,
    aco_chooser,
    greedy_chooser,
    random_chooser,
    rollout,
)


@dataclass
class PolicyOutcome:
    """What one policy acquired on each instance, and how well it then predicted."""

    masks: np.ndarray  # (instances, features) bool
    accuracy: float
    mean_features: float
    objective: float


def score_masks(model: MaskedClassifier, x: torch.Tensor, y: torch.Tensor, masks: torch.Tensor,
                cost: float) -> tuple[float, float]:
    """Accuracy and mean ``CE + cost * |mask|`` of the predictions from the acquired features."""
    with torch.no_grad():
        logits = model(x, masks)
    accuracy = float((logits.argmax(dim=1) == y).double().mean())
    objective = float((F.cross_entropy(logits, y, reduction="none") + cost * masks.sum(dim=1)).mean())
    return accuracy, objective


def run_policies(model: MaskedClassifier, train: Dataset, test: Dataset, names: list[str],
                 settings: AcquisitionSettings, instances: int, generator: torch.Generator) -> dict[str, PolicyOutcome]:
    """Roll out each named policy on the first ``instances`` test points; ACO first, as the matched-budget
    policies (random, greedy_budget) acquire as many features as it did on each instance."""
    model.eval()
    x_test, y_test = torch.from_numpy(test.x[:instances]), torch.from_numpy(test.y[:instances])
    tie_order = torch.randperm(len(train.y), generator=generator)
    oracle = NeighbourOracle(model, torch.from_numpy(train.x), torch.from_numpy(train.y), settings, tie_order)
    choosers = {"aco": aco_chooser(oracle, generator), "greedy": greedy_chooser(oracle),
                "greedy_budget": greedy_chooser(oracle, stop=False), "random": random_chooser(generator)}
    outcomes: dict[str, PolicyOutcome] = {}
    for name in sorted(names, key=POLICIES.index):
        budgets = [int(b) for b in outcomes["aco"].masks.sum(axis=1)] if name in MATCHED else [None] * len(y_test)
        masks = torch.zeros(x_test.shape, dtype=torch.bool)
        for row, (x, budget) in enumerate(zip(x_test, budgets)):
            masks[row, rollout(choosers[name], x, budget)] = True
        accuracy, objective = score_masks(model, x_test, y_test, masks, settings.cost)
        outcomes[name] = PolicyOutcome(masks.numpy(), accuracy, float(masks.sum(dim=1).double().mean()), objective)
    return outcomes
