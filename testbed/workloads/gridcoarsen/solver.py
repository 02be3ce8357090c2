"""Explicit finite-volume solvers on a Voronoi grid, written as graph message passing.

Two-point-flux transmissibility with the harmonic mean of the permeabilities,
T_ij = 2 k_i k_j / (k_i + k_j) * e_ij / h_ij, and the net flux out of cell i,
div_i = sum_j T_ij (u_i - u_j), which sums to zero over the grid (every edge adds +f and -f).

- Parabolic (slightly compressible porous-media flow), explicit in the flux, implicit in the well:
  u_i^{n+1} = [u_i^n + dt/V_i (w_i p_bhp - div_i^n)] / (1 + dt/V_i w_i).
- Wave (leapfrog), with a Ricker-wavelet point source s(t) in the source cells:
  u_i^{n+1} = 2 u_i^n - u_i^{n-1} - dt^2/V_i div_i^n + dt^2 w_i s(t_n) / V_i.

The output interval ``dt`` is split into substeps when a grid's own stability bound asks for it
(Gershgorin bound on V^{-1} L: parabolic dt <= 1 / max_i S_i, wave dt <= sqrt(2 / max_i S_i),
S_i = sum_j T_ij / V_i), so coarse grids are never run unstably and all grids are sampled at the
same times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from testbed.workloads.gridcoarsen.config import Equation
from testbed.workloads.gridcoarsen.geometry import Geometry


@dataclass(frozen=True)
class Physics:
    """What the solvers integrate: the equation, output interval and count, source settings."""

    equation: Equation
    dt: float
    steps: int
    bottom_hole_pressure: float = 1.0
    ricker_frequency: float = 2.0
    ricker_delay: float = 0.6


def transmissibility(geom: Geometry, permeability: torch.Tensor) -> torch.Tensor:
    """T_ij = 2 k_i k_j / (k_i + k_j) * e_ij / h_ij per internal edge (harmonic-mean two-point flux)."""
    k_i, k_j = permeability[geom.edge_index[:, 0]], permeability[geom.edge_index[:, 1]]
    return 2 * k_i * k_j / (k_i + k_j) * geom.edge_lengths / geom.distances


def net_outflow(u: torch.Tensor, edge_index: torch.Tensor, trans: torch.Tensor) -> torch.Tensor:
    """div_i = sum_j T_ij (u_i - u_j): the antisymmetric flux, scattered to both ends of each edge."""
    flux = trans * (u[edge_index[:, 0]] - u[edge_index[:, 1]])
    return torch.zeros_like(u).index_add(0, edge_index[:, 0], flux).index_add(0, edge_index[:, 1], -flux)


def stable_step(geom: Geometry, trans: torch.Tensor, equation: Equation) -> float:
    """The largest step the explicit scheme is guaranteed stable with on this grid (Gershgorin)."""
    edge_index = geom.edge_index
    conductance = torch.zeros_like(geom.areas).index_add(0, edge_index[:, 0], trans)
    conductance = conductance.index_add(0, edge_index[:, 1], trans)
    rate = float((conductance / geom.areas).max().detach())
    return 1.0 / rate if equation == "parabolic" else math.sqrt(2.0 / rate)


def ricker(t: float, frequency: float, delay: float) -> float:
    """Ricker wavelet (1 - 2 a) exp(-a), a = (pi f (t - delay))^2: the wave equation's source signal."""
    a = (math.pi * frequency * (t - delay)) ** 2
    return (1 - 2 * a) * math.exp(-a)


def rollout(geom: Geometry, permeability: torch.Tensor, wells: torch.Tensor, sensors: torch.Tensor,
            physics: Physics, safety: float = 0.9, initial: torch.Tensor | None = None) -> torch.Tensor:
    """u at the ``sensors`` after each of ``physics.steps`` output intervals (steps x sensors).

    ``wells`` is the 0/1 source indicator w_i; u starts at ``initial`` (default 0), at rest for the
    wave equation. Differentiable in the geometry and permeability.
    """
    trans = transmissibility(geom, permeability)
    substeps = max(1, math.ceil(physics.dt / (safety * stable_step(geom, trans, physics.equation))))
    dt = physics.dt / substeps
    ratio = dt / geom.areas
    u = torch.zeros_like(geom.areas) if initial is None else initial
    previous = u
    recorded = []
    for n in range(physics.steps * substeps):
        div = net_outflow(u, geom.edge_index, trans)
        if physics.equation == "parabolic":
            u = (u + ratio * (wells * physics.bottom_hole_pressure - div)) / (1 + ratio * wells)
        else:
            pulse = ricker(n * dt, physics.ricker_frequency, physics.ricker_delay)
            u, previous = 2 * u - previous - dt * ratio * (div - wells * pulse), u
        if (n + 1) % substeps == 0:
            recorded.append(u[sensors])
    return torch.stack(recorded)


def substeps_needed(geom: Geometry, permeability: torch.Tensor, physics: Physics, safety: float = 0.9) -> int:
    """How many substeps per output interval this grid needs (1 = stable at the interval itself)."""
    step = stable_step(geom, transmissibility(geom, permeability), physics.equation)
    return max(1, math.ceil(physics.dt / (safety * step)))
