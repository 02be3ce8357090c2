"""The data and model both sides of the app share: scikit-learn's digits split Dirichlet-wise, a small CNN."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from sklearn.datasets import load_digits

from testbed.data.partition import DirichletPartition, partition_indices

TEST_ROWS = 300  # the first rows of the shuffled digits are the server's test set


def net() -> torch.nn.Module:
    """A CNN for 8x8 digits, small enough for a CPU simulation."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))


@cache
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as (N, 1, 8, 8) floats in [0, 1] and their labels, in a fixed shuffled order."""
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    return torch.tensor(x[order] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8), torch.tensor(y[order])


@cache
def shard(partition_id: int, num_partitions: int, beta: float) -> torch.Tensor:
    """Row indices of one client's Dirichlet(beta) label-skewed share of the training rows."""
    _, y = digits()
    shards = partition_indices(y[TEST_ROWS:].numpy(), num_partitions, DirichletPartition(beta=beta),
                               np.random.default_rng(1))
    return torch.from_numpy(shards[partition_id]) + TEST_ROWS


def accuracy(state: dict[str, torch.Tensor]) -> float:
    """Top-1 accuracy of a state dict on the test rows."""
    x, y = digits()
    model = net()
    model.load_state_dict(state)
    with torch.no_grad():
        return float((model(x[:TEST_ROWS]).argmax(dim=1) == y[:TEST_ROWS]).float().mean())
