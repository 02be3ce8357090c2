"""Data for active feature acquisition: jointly-informative synthetic sets and bundled tabular sets.

``parity``: ``x ~ U(-1, 1)^d`` and ``y`` is the parity of the signs of the first ``informative``
features. Any proper subset of those features carries no information about ``y`` (each sign is
independent of the parity of the others), so an acquirer that scores one feature at a time sees
no gain anywhere: the stress test for non-greedy acquisition.

``cube``: the synthetic set of the ACO paper's code (Valancius et al. 2024): 20 features, 8
classes; for class ``y`` the features ``y, y+1, y+2`` are normal around the three bits of ``y``
(standard deviation ``sigma``), every other feature is uniform on [0, 1).

``tabular``: a bundled tabular dataset chosen by the scenario's ``data.dataset`` (breast_cancer,
wine, iris), standardised with the training split's statistics.
"""

from __future__ import annotations

import numpy as np

from testbed.data import Dataset, load_selected, train_test_split
from testbed.data.config import DataConfig


def parity_dataset(num_samples: int, num_features: int, informative: int, rng: np.random.Generator) -> Dataset:
    """The jointly-informative set: the label is the sign parity of the first ``informative`` features."""
    x = rng.uniform(-1.0, 1.0, size=(num_samples, num_features)).astype(np.float32)
    y = ((x[:, :informative] > 0).sum(axis=1) % 2).astype(np.int64)
    return Dataset("parity", x, y, 2, None)


def cube_dataset(num_samples: int, sigma: float, rng: np.random.Generator, num_features: int = 20) -> Dataset:
    """The ACO paper's cube: class ``y`` puts its three bits, blurred by ``sigma``, on features y..y+2."""
    y = rng.integers(0, 8, size=num_samples)
    x = rng.uniform(0.0, 1.0, size=(num_samples, num_features))
    bits = np.stack([y % 2, (y // 2) % 2, (y // 4) % 2], axis=1)
    rows = np.arange(num_samples)[:, None]
    x[rows, y[:, None] + np.arange(3)] = bits + sigma * rng.standard_normal((num_samples, 3))
    return Dataset("cube", x.astype(np.float32), y.astype(np.int64), 8, None)


def acquisition_data(source: str, data: DataConfig, num_samples: int, num_features: int, informative: int,
                     sigma: float, rng: np.random.Generator, split_seed: int) -> tuple[Dataset, Dataset]:
    """Train and test splits of the configured source (flattened features)."""
    if source == "parity":
        full = parity_dataset(num_samples, num_features, informative, rng)
    elif source == "cube":
        full = cube_dataset(num_samples, sigma, rng)
    else:
        full = load_selected(data)
        full = Dataset(full.name, full.x.reshape(len(full.y), -1), full.y, full.num_classes, None)
    return train_test_split(full, data.test_fraction, split_seed)
