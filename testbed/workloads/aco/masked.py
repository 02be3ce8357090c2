"""A classifier for arbitrary feature subsets: the learned predictor of approximate ACO (AACO).

The network sees ``[x * m, m]``: the observed values (zero elsewhere, the training mean after
standardisation) and the mask itself, so "unobserved" is distinguishable from "observed zero".
It is trained on random masks whose size is uniform on 0..d and whose members are uniform given
the size, so small and large subsets are equally represented (the paper's arbitrary-subset
classifier, here an MLP instead of the paper's XGBoost).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from testbed.workloads.training import optimizer_step


class MaskedClassifier(nn.Module):
    """MLP on ``[x * m, m]`` predicting class logits from any subset of features."""

    def __init__(self, num_features: int, num_classes: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2 * num_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = mask.to(x.dtype)
        return self.net(torch.cat([x * mask, mask], dim=-1))


def random_masks(rows: int, num_features: int, generator: torch.Generator) -> torch.Tensor:
    """Boolean masks with size uniform on 0..d and uniformly chosen members given the size."""
    sizes = torch.randint(0, num_features + 1, (rows, 1), generator=generator)
    ranks = torch.rand(rows, num_features, generator=generator).argsort(dim=1).argsort(dim=1)
    return ranks < sizes


def train_masked_steps(model: MaskedClassifier, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                       y: torch.Tensor, batch_indices, generator: torch.Generator, steps: int) -> float:
    """``steps`` Adam steps of cross-entropy on batches with fresh random masks; mean loss."""
    model.train()
    total = 0.0
    for _ in range(steps):
        batch = batch_indices()
        mask = random_masks(len(batch), x.shape[1], generator)
        total += optimizer_step(optimizer, F.cross_entropy(model(x[batch], mask), y[batch]))
    return total / steps
