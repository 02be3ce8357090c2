"""Differentiable coarsening of unstructured grids (Shumilin, Ryabov, Yavich, Burnaev, Vanovskiy): Voronoi
geometry in torch, explicit finite-volume solvers, and the ``gridcoarsen`` workload."""

from testbed.workloads.gridcoarsen.geometry import Geometry, geometry, topology
from testbed.workloads.gridcoarsen.workload import GridCoarsenConfig, GridCoarsenWorkload

__all__ = ["Geometry", "GridCoarsenConfig", "GridCoarsenWorkload", "geometry", "topology"]
