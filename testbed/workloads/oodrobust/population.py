"""The model zoo: ~20 small digit classifiers trained in different ways, each with its own RNG streams.

OODRobustBench studies hundreds of public models; the miniature mirrors its main families:
standard (ERM) training, adversarial training against the seen threat at several budgets (PGD-AT,
Madry et al. 2018), data augmentation (Gaussian noise, random sub-pixel shifts), and adversarial
training on augmented data; widths vary across the zoo as architectures do in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from testbed.data import Dataset
from testbed.seeding import SeedTree
from testbed.workloads.classifier.model import BatchStream
from testbed.workloads.oodrobust.attacks import pgd_training_examples
from testbed.workloads.oodrobust.shifts import translate
from testbed.workloads.training import optimizer_step

AUGMENT_NOISE_STD = 0.15
RECIPE_GROUPS = {"standard": "standard", "noise_aug": "augmented", "shift_aug": "augmented",
                 "pgd_at": "adversarial", "pgd_at_aug": "adversarial + augmented"}


@dataclass(frozen=True)
class MemberSpec:
    """How one member of the population is built and trained."""

    recipe: str  # standard | noise_aug | shift_aug | pgd_at | pgd_at_aug
    epsilon: float  # L-inf training budget (0 for non-adversarial recipes)
    width: int

    @property
    def label(self) -> str:
        budget = f"@{self.epsilon:g}" if self.epsilon else ""
        return f"{self.recipe}{budget}/w{self.width}"

    @property
    def group(self) -> str:
        return RECIPE_GROUPS[self.recipe]


def population_specs(size: int, epsilons: list[float], widths: list[int]) -> list[MemberSpec]:
    """``size`` members: the recipes (adversarial ones at every budget) cycled, widths cycled alongside."""
    recipes = [("standard", 0.0), ("noise_aug", 0.0), ("shift_aug", 0.0)]
    recipes += [("pgd_at", e) for e in epsilons] + [("pgd_at_aug", e) for e in epsilons]
    return [MemberSpec(recipes[i % len(recipes)][0], recipes[i % len(recipes)][1], widths[i % len(widths)])
            for i in range(size)]


def build_member_model(spec: MemberSpec, num_features: int, num_classes: int) -> nn.Module:
    """A two-hidden-layer MLP of the member's width (parameters from torch's global RNG)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(num_features, spec.width), nn.ReLU(),
                         nn.Linear(spec.width, spec.width), nn.ReLU(), nn.Linear(spec.width, num_classes))


def augment(x: torch.Tensor, recipe: str, generator: torch.Generator) -> torch.Tensor:
    """The recipe's input augmentation (identity for standard and pgd_at)."""
    if recipe in ("noise_aug", "pgd_at_aug"):
        return (x + AUGMENT_NOISE_STD * torch.randn(x.shape, generator=generator)).clamp(0, 1)
    if recipe == "shift_aug":
        severity = int(torch.randint(1, 6, (), generator=generator))
        return translate(x, severity, generator)
    return x


class Member:
    """One model of the zoo with its optimizer, batch stream and augmentation/attack generator."""

    def __init__(self, spec: MemberSpec, train_set: Dataset, seeds: SeedTree, lr: float, batch_size: int,
                 attack_steps: int):
        self.spec, self.train_set, self.attack_steps = spec, train_set, attack_steps
        torch.manual_seed(seeds.integer("init"))
        self.model = build_member_model(spec, train_set.num_features, train_set.num_classes)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.stream = BatchStream(len(train_set.y), min(batch_size, len(train_set.y)), seeds.torch("batches"))
        self.generator = seeds.torch("augment")
        self.x, self.y = torch.from_numpy(train_set.x), torch.from_numpy(train_set.y)

    def train(self, steps: int) -> float:
        """``steps`` updates of the member's recipe; returns the mean training loss."""
        total = 0.0
        for _ in range(steps):
            batch = self.stream.next()
            x, y = augment(self.x[batch], self.spec.recipe, self.generator), self.y[batch]
            if self.spec.epsilon > 0:  # PGD-AT: descend the loss at the inner maximiser
                self.model.eval()
                x = pgd_training_examples(self.model, x, y, self.spec.epsilon, self.attack_steps, self.generator)
            self.model.train()
            total += optimizer_step(self.optimizer, F.cross_entropy(self.model(x), y))
        return total / max(steps, 1)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stream": self.stream.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stream.load_state_dict(state["stream"])
        self.generator.set_state(state["generator"])
