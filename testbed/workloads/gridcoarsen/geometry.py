"""Differentiable Voronoi geometry of points in the unit square (cell areas, edge lengths, centre distances).

The topology (which points are Voronoi neighbours) comes from `scipy.spatial.Delaunay` without
gradient; the measures are torch functions of the coordinates, so autograd differentiates the
finite-volume coefficients of the paper (V_i, e_ij, h_ij) with respect to the point positions.

Clipping to the square: the points are mirrored across its four sides. The bisector between a
point and its mirror is the side itself, so the Voronoi cells of the original points in the
augmented set are exactly their cells clipped to the square.

Cell area without ordering the cell's vertices: a convex cell is the union of triangles from the
generator to each of its edges, and the generator lies at distance h_ij / 2 from the bisector
with neighbour j, so V_i = sum_j e_ij h_ij / 4 over all Delaunay neighbours (mirrors included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.spatial import Delaunay

# Keeps sqrt differentiable at zero length (four cocircular points give a zero-length Voronoi edge).
_TINY = 1e-30


def mirrored(points: torch.Tensor) -> torch.Tensor:
    """The points followed by their reflections across x=0, x=1, y=0, y=1 (shape 5N x 2)."""
    x, y = points[:, 0], points[:, 1]
    reflections = [torch.stack([-x, y], 1), torch.stack([2 - x, y], 1),
                   torch.stack([x, -y], 1), torch.stack([x, 2 - y], 1)]
    return torch.cat([points, *reflections], 0)


@dataclass(frozen=True)
class Topology:
    """Delaunay edges touching an original point, each with the two triangles that share it.

    ``edges`` (E x 2) index the augmented points (first column always an original point);
    ``triangles`` (T x 3) index them too; ``edge_triangles`` (E x 2) index ``triangles``.
    ``internal`` marks edges whose both ends are original points (the flux edges).
    """

    num_points: int
    triangles: np.ndarray
    edges: np.ndarray
    edge_triangles: np.ndarray
    internal: np.ndarray


def topology(points: np.ndarray) -> Topology:
    """The Delaunay topology of the mirrored point set (computed without gradient)."""
    n = len(points)
    augmented = mirrored(torch.as_tensor(points, dtype=torch.float64)).numpy()
    triangles = Delaunay(augmented).simplices.astype(np.int64)
    touching = (triangles < n).any(axis=1)
    triangles = triangles[touching]
    # Each triangle has 3 edges; an edge is shared by exactly two triangles when it touches an
    # original point, since the originals lie strictly inside the hull of their mirrors.
    pairs = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    owner = np.tile(np.arange(len(triangles)), 3)
    lo, hi = pairs.min(1), pairs.max(1)
    keep = lo < n
    lo, hi, owner = lo[keep], hi[keep], owner[keep]
    order = np.lexsort((hi, lo))
    lo, hi, owner = lo[order], hi[order], owner[order]
    if len(lo) % 2 or not (np.all(lo[0::2] == lo[1::2]) and np.all(hi[0::2] == hi[1::2])):
        raise ValueError("an edge at an original point is not shared by two triangles (points outside the square?)")
    edges = np.stack([lo[0::2], hi[0::2]], 1)
    edge_triangles = np.stack([owner[0::2], owner[1::2]], 1)
    return Topology(n, triangles, edges, edge_triangles, edges[:, 1] < n)


def circumcentres(corners: torch.Tensor) -> torch.Tensor:
    """Circumcentres of triangles given as (T x 3 x 2) corner coordinates."""
    a, b, c = corners[:, 0], corners[:, 1], corners[:, 2]
    ab, ac = b - a, c - a
    d = 2 * (ab[:, 0] * ac[:, 1] - ab[:, 1] * ac[:, 0])
    ab2, ac2 = (ab * ab).sum(1), (ac * ac).sum(1)
    ux = (ac[:, 1] * ab2 - ab[:, 1] * ac2) / d
    uy = (ab[:, 0] * ac2 - ac[:, 0] * ab2) / d
    return a + torch.stack([ux, uy], 1)


def _length(vectors: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((vectors * vectors).sum(1) + _TINY)


@dataclass
class Geometry:
    """Finite-volume geometry of a grid: cell areas V (N), and per internal edge (i, j) the Voronoi
    edge length e_ij and the centre distance h_ij."""

    areas: torch.Tensor
    edge_index: torch.Tensor
    edge_lengths: torch.Tensor
    distances: torch.Tensor


def geometry(points: torch.Tensor, topo: Topology | None = None) -> Geometry:
    """Differentiable V_i, e_ij, h_ij of the Voronoi cells of ``points`` clipped to the unit square."""
    if topo is None:
        topo = topology(points.detach().cpu().numpy())
    augmented = mirrored(points)
    centres = circumcentres(augmented[torch.as_tensor(topo.triangles)])
    edges = torch.as_tensor(topo.edges)
    pair = torch.as_tensor(topo.edge_triangles)
    lengths = _length(centres[pair[:, 0]] - centres[pair[:, 1]])
    distances = _length(augmented[edges[:, 0]] - augmented[edges[:, 1]])
    quarter = lengths * distances / 4
    areas = torch.zeros(topo.num_points, dtype=points.dtype).index_add(0, edges[:, 0], quarter)
    inner = edges[:, 1] < topo.num_points
    areas = areas.index_add(0, edges[inner, 1], quarter[inner])
    internal = torch.as_tensor(topo.internal)
    return Geometry(areas, edges[internal], lengths[internal], distances[internal])
