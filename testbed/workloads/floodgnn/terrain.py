"""Real terrain for the flood workload: crops of matplotlib's bundled DEM and their D8 flow-direction graph.

`matplotlib.cbook.get_sample_data('jacksboro_fault_dem.npz')` is a real 3-arc-second elevation grid
(344 x 403 cells, 236-1076 m). The workload cuts it into a 3 x 3 layout of square regions (the
paper's nine sub-watersheds), each the centre crop of one ninth of the grid.

D8 (Jenson & Domingue 1988): every cell has one directed edge to its steepest-descent neighbour
among its 8 neighbours (drop over distance, diagonals at sqrt(2) spacing); pits and cells lower than
all neighbours inside the crop have no out-edge.
"""

from __future__ import annotations

import numpy as np
from matplotlib import cbook

from testbed.workloads.floodgnn.config import DEM_FILE, REGIONS

# The DEM's grid spacing: 3 arc-seconds, about 92 m north-south at 36.5 degrees north.
CELL_SIZE_M = 90.0
_NEIGHBOURS = [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)]


def load_dem() -> np.ndarray:
    """The bundled Jacksboro-fault elevation grid in metres (float64)."""
    # matplotlib's stub omits the NpzFile that an .npz sample opens as
    return np.asarray(cbook.get_sample_data(DEM_FILE)["elevation"], dtype=np.float64)  # type: ignore[index]


def regions(size: int) -> list[np.ndarray]:
    """Nine ``size x size`` elevation crops, the centre of each block of a 3 x 3 split of the DEM."""
    dem = load_dem()
    rows, cols = dem.shape[0] // 3, dem.shape[1] // 3
    if size > min(rows, cols):
        raise ValueError(f"region size {size} exceeds a ninth of the DEM ({rows} x {cols})")
    crops = []
    for block in range(REGIONS):
        top = (block // 3) * rows + (rows - size) // 2
        left = (block % 3) * cols + (cols - size) // 2
        crops.append(dem[top:top + size, left:left + size].copy())
    return crops


def d8_edges(elevation: np.ndarray) -> np.ndarray:
    """Directed D8 edges (E x 2, source then target, flat row-major indices) of one elevation grid."""
    n_rows, n_cols = elevation.shape
    padded = np.pad(elevation, 1, constant_values=np.inf)
    slopes = np.stack([(elevation - padded[1 + dr:1 + dr + n_rows, 1 + dc:1 + dc + n_cols]) / np.hypot(dr, dc)
                       for dr, dc in _NEIGHBOURS])
    best = slopes.argmax(0)
    has_outlet = slopes.max(0) > 0
    rows, cols = np.nonzero(has_outlet)
    offsets = np.array(_NEIGHBOURS)[best[rows, cols]]
    sources = rows * n_cols + cols
    targets = (rows + offsets[:, 0]) * n_cols + cols + offsets[:, 1]
    return np.stack([sources, targets], 1)


def flow_accumulation(edges: np.ndarray, num_cells: int) -> np.ndarray:
    """Number of cells draining through each cell (itself included), following the D8 edges."""
    downstream = np.full(num_cells, -1)
    downstream[edges[:, 0]] = edges[:, 1]
    accumulation = np.ones(num_cells)
    indegree = np.bincount(downstream[downstream >= 0], minlength=num_cells)
    ready = list(np.nonzero(indegree == 0)[0])
    while ready:
        cell = ready.pop()
        target = downstream[cell]
        if target >= 0:
            accumulation[target] += accumulation[cell]
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    return accumulation
