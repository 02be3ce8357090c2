"""The fine model and its coarse initialisations: points, permeability, the source and the sensors.

Fine grid: stratified random points in the unit square (one uniform point per cell of a
``side x side`` lattice, so no cell is tiny and the fine step stays reasonable), plus the source
point and the sensor points. Permeability k(x, y) = exp(contrast * sin(4 pi x) cos(2 pi y)),
the paper's "sinusoidal" layout.

Coarse grids keep the source and sensor points exactly (they are appended and never move):
- ``kmeans``: k-means centroids of the other fine points, each with its cluster's mean
  permeability (the paper's initialisation);
- ``random``: a random subsample of the other fine points with their own permeability.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.cluster import KMeans

from testbed.workloads.gridcoarsen.config import SENSORS, SOURCE


@dataclass
class Grid:
    """A grid's points (N x 2), permeability (N), and the fixed points: the last ``num_fixed`` rows
    are the source then the sensors."""

    points: torch.Tensor
    permeability: torch.Tensor
    num_fixed: int

    @property
    def num_free(self) -> int:
        return len(self.points) - self.num_fixed

    @property
    def wells(self) -> torch.Tensor:
        """The source indicator w_i."""
        wells = torch.zeros(len(self.points), dtype=torch.float64)
        wells[self.num_free] = 1.0
        return wells

    @property
    def sensors(self) -> torch.Tensor:
        return torch.arange(self.num_free + 1, len(self.points))


def permeability_field(points: np.ndarray, contrast: float) -> np.ndarray:
    """k(x, y) = exp(contrast * sin(4 pi x) cos(2 pi y))."""
    return np.exp(contrast * np.sin(4 * np.pi * points[:, 0]) * np.cos(2 * np.pi * points[:, 1]))


def fixed_points() -> np.ndarray:
    return np.array([SOURCE, *SENSORS])


def fine_grid(side: int, contrast: float, rng: np.random.Generator) -> Grid:
    """``side**2`` stratified random points (minus those crowding a fixed point) plus the fixed points."""
    cells = np.stack(np.meshgrid(np.arange(side), np.arange(side), indexing="ij"), -1).reshape(-1, 2)
    points = (cells + rng.uniform(0.1, 0.9, size=cells.shape)) / side
    fixed = fixed_points()
    # Drop lattice points too close to a fixed point: they would leave a sliver cell and a tiny step.
    crowding = np.linalg.norm(points[:, None] - fixed[None], axis=-1).min(1) < 0.4 / side
    points = np.concatenate([points[~crowding], fixed])
    return Grid(torch.tensor(points), torch.tensor(permeability_field(points, contrast)), len(fixed))


def kmeans_grid(fine: Grid, size: int, seed: int) -> Grid:
    """``size`` points: k-means centroids of the free fine points with cluster-mean permeability, plus the fixed."""
    free = fine.points[:fine.num_free].numpy()
    clusters = size - fine.num_fixed
    labels = KMeans(clusters, n_init=3, random_state=seed).fit_predict(free)
    counts = np.bincount(labels, minlength=clusters)[:, None]
    centroids = np.zeros((clusters, 2))
    np.add.at(centroids, labels, free)
    mean_k = np.bincount(labels, weights=fine.permeability[:fine.num_free].numpy(), minlength=clusters)
    points = np.concatenate([centroids / counts, fine.points[fine.num_free:].numpy()])
    permeability = np.concatenate([mean_k / counts[:, 0], fine.permeability[fine.num_free:].numpy()])
    return Grid(torch.tensor(points), torch.tensor(permeability), fine.num_fixed)


def random_grid(fine: Grid, size: int, rng: np.random.Generator) -> Grid:
    """``size`` points: a random subsample of the free fine points (own permeability), plus the fixed."""
    chosen = np.sort(rng.choice(fine.num_free, size - fine.num_fixed, replace=False))
    keep = torch.cat([torch.as_tensor(chosen), torch.arange(fine.num_free, len(fine.points))])
    return Grid(fine.points[keep].clone(), fine.permeability[keep].clone(), fine.num_fixed)
