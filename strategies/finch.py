"""Parameter-free first-neighbour clustering (FINCH, Sarfraz et al., CVPR 2019).

SDEA clusters the learned 1-D aggregation weights with FINCH. FINCH links
every point to its first (nearest) neighbour; the adjacency of Eq. (1) of the
FINCH paper is ``A(i, j) = 1`` if ``j = kappa_i`` or ``kappa_j = i`` or
``kappa_i = kappa_j``, and the connected components of ``A`` are the first
partition. Repeating on the cluster means gives a hierarchy of ever coarser
partitions, which stops once one cluster is left or nothing merges.

Written from the paper's description; only numpy is needed (the authors' code
relies on scikit-learn and scipy).
"""

from __future__ import annotations

import numpy as np


def _first_neighbours(points: np.ndarray) -> np.ndarray:
    """Index of each row's nearest other row (Euclidean); ties go to the lower index."""
    diff = points[:, None, :] - points[None, :, :]
    dist = np.sqrt((diff**2).sum(axis=-1))
    np.fill_diagonal(dist, np.inf)
    return np.argmin(dist, axis=1)


def _components(kappa: np.ndarray) -> np.ndarray:
    """Connected components of FINCH's adjacency, labelled 0.. in order of first member."""
    n = kappa.shape[0]
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Linking i to kappa_i covers both "j = kappa_i" and "kappa_j = i"; points
    # sharing a first neighbour are then joined through that neighbour, which is
    # exactly the "kappa_i = kappa_j" case.
    for i in range(n):
        ri, rj = find(i), find(int(kappa[i]))
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    roots = [find(i) for i in range(n)]
    relabel: dict[int, int] = {}
    return np.array([relabel.setdefault(r, len(relabel)) for r in roots], dtype=int)


def cluster_means(points: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean of ``points`` per cluster label, in label order."""
    points = np.asarray(points, dtype=float).reshape(len(labels), -1)
    return np.stack([points[labels == c].mean(axis=0) for c in range(labels.max() + 1)])


def finch(points: np.ndarray) -> list[np.ndarray]:
    """All FINCH partitions of ``points`` (shape ``[n]`` or ``[n, d]``), finest first.

    Each partition is an ``[n]`` integer label array. A partition with a single
    cluster is not returned (FINCH stops there), so two or fewer points, or a
    first step that joins everything, give an empty list.
    """
    pts = np.asarray(points, dtype=float)
    pts = pts.reshape(pts.shape[0], -1)
    partitions: list[np.ndarray] = []
    labels = np.arange(pts.shape[0])
    current = pts
    while current.shape[0] > 2:
        step = _components(_first_neighbours(current))
        if step.max() + 1 == current.shape[0]:
            break  # nothing merged: the hierarchy is complete
        labels = step[labels]
        if labels.max() == 0:
            break  # one cluster left
        partitions.append(labels.copy())
        current = cluster_means(pts, labels)
    return partitions


def merge_to(points: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Merge the two clusters with the closest means until ``k`` clusters remain.

    This is FINCH's own route to a requested number of clusters (merging one
    first-neighbour pair at a time below the nearest coarser partition).
    """
    if k < 1:
        raise ValueError(f"k: must be >= 1, got {k}")
    labels = np.asarray(labels, dtype=int).copy()
    while labels.max() + 1 > k:
        means = cluster_means(points, labels)
        kappa = _first_neighbours(means)
        gaps = np.linalg.norm(means - means[kappa], axis=1)
        a = int(np.argmin(gaps))
        keep, drop = sorted((a, int(kappa[a])))
        labels[labels == drop] = keep
        labels[labels > drop] -= 1
    return labels
