"""Ground truth for the flood workload: storms and a local-inertial shallow-water solver (LISFLOOD-FP's scheme).

Local inertial equations (Bates et al. 2010, de Almeida et al. 2012) on a raster, per cell face:
  q <- (q - g h_f dt d(h + z)/dx) / (1 + g dt n^2 |q| / h_f^(7/3)),
with h_f = max(eta_l, eta_r) - max(z_l, z_r) the depth over the face (eta = h + z), then
  h <- h + dt (sum q_in - sum q_out) / dx + dt * rain.
The step is adaptive, dt = 0.7 dx / sqrt(g max h); outflow that would make a cell negative is
scaled down (positivity). The region's boundary is closed, so the water volume changes only by
the rain that falls: a property the tests check exactly.

All regions and events are integrated together as one batch (B x rows x cols).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRAVITY = 9.81
MANNING_N = 0.05
_DRY = 1e-4
_MM_PER_HOUR = 1e-3 / 3600.0


@dataclass(frozen=True)
class Storm:
    """A Gaussian rain cell moving straight across the region, over a uniform background fraction (0: none)."""

    peak_mm_per_hour: float
    start_min: float
    duration_min: float
    radius: float          # in units of the region's side
    start: tuple[float, float]
    velocity: tuple[float, float]   # region sides per hour
    background: float      # share of the peak that falls everywhere

    def rate(self, t_min: float, size: int) -> np.ndarray:
        """Rain rate (m/s) on a ``size x size`` grid at minute ``t_min``."""
        if not self.start_min <= t_min < self.start_min + self.duration_min:
            return np.zeros((size, size))
        hours = (t_min - self.start_min) / 60.0
        centre = np.array(self.start) + hours * np.array(self.velocity)
        grid = (np.arange(size) + 0.5) / size
        distance2 = (grid[:, None] - centre[0]) ** 2 + (grid[None, :] - centre[1]) ** 2
        shape = self.background + (1 - self.background) * np.exp(-distance2 / (2 * self.radius ** 2))
        return self.peak_mm_per_hour * _MM_PER_HOUR * shape


def random_storm(rng: np.random.Generator, horizon_min: float, radius: tuple[float, float] = (0.1, 0.25),
                 background: float = 0.0) -> Storm:
    """One storm: 20-80 mm/h peak, 40-120 min long, starting in the first quarter of the horizon.

    ``radius`` bounds the rain cell's width (region sides) and ``background`` the share of the peak
    that falls everywhere. A local cell without background leaves dry ground at every step, which
    a wet-area score (CSI) needs to tell a model from one that wets every cell. The draws are the
    same whatever the bounds, so one seed gives the same tracks and timings under any of them.
    """
    heading = rng.uniform(0, 2 * np.pi)
    speed = rng.uniform(0.2, 1.0)
    start = rng.uniform(0.2, 0.8, size=2)
    return Storm(peak_mm_per_hour=rng.uniform(20, 80), start_min=rng.uniform(0, horizon_min / 4),
                 duration_min=rng.uniform(40, 120), radius=rng.uniform(*radius), start=tuple(start),
                 velocity=(speed * np.cos(heading), speed * np.sin(heading)), background=rng.uniform(0.0, background))


def _face_flux(q, eta_l, eta_r, z_l, z_r, dt, dx):
    depth = np.maximum(eta_l, eta_r) - np.maximum(z_l, z_r)
    wet = depth > _DRY
    safe = np.where(wet, depth, 1.0)
    updated = (q - GRAVITY * safe * dt * (eta_r - eta_l) / dx) / (
        1 + GRAVITY * dt * MANNING_N ** 2 * np.abs(q) / safe ** (7 / 3))
    return np.where(wet, updated, 0.0)


def _limit_outflow(h, qx, qy, dt, dx):
    """Scale each cell's outgoing fluxes so that it cannot lose more water than it holds."""
    out = np.zeros_like(h)
    out[:, :, :-1] += np.maximum(qx, 0)
    out[:, :, 1:] += np.maximum(-qx, 0)
    out[:, :-1, :] += np.maximum(qy, 0)
    out[:, 1:, :] += np.maximum(-qy, 0)
    scale = np.minimum(1.0, h * dx / np.maximum(out * dt, 1e-300))
    qx = np.where(qx > 0, qx * scale[:, :, :-1], qx * scale[:, :, 1:])
    qy = np.where(qy > 0, qy * scale[:, :-1, :], qy * scale[:, 1:, :])
    return qx, qy


def simulate(elevation: np.ndarray, storms: list[list[Storm]], steps: int, interval_min: float,
             dx: float) -> tuple[np.ndarray, np.ndarray]:
    """Depth after each interval and rain depth fallen in it, both (B x steps x rows x cols) in metres.

    ``elevation`` is (B x rows x cols); ``storms[b]`` lists the storms falling on batch member b.
    """
    batch, size = elevation.shape[0], elevation.shape[1]
    h = np.zeros_like(elevation)
    qx = np.zeros((batch, size, size - 1))
    qy = np.zeros((batch, size - 1, size))
    depths, rains = np.zeros((2, batch, steps, size, size))
    t = 0.0
    for step in range(steps):
        end = (step + 1) * interval_min * 60.0
        while t < end - 1e-9:
            dt = min(0.7 * dx / np.sqrt(GRAVITY * max(h.max(), 0.01)), end - t)
            rate = np.stack([sum((s.rate(t / 60.0, size) for s in member), np.zeros((size, size)))
                             for member in storms])
            eta = elevation + h
            qx = _face_flux(qx, eta[:, :, :-1], eta[:, :, 1:], elevation[:, :, :-1], elevation[:, :, 1:], dt, dx)
            qy = _face_flux(qy, eta[:, :-1, :], eta[:, 1:, :], elevation[:, :-1, :], elevation[:, 1:, :], dt, dx)
            qx, qy = _limit_outflow(h, qx, qy, dt, dx)
            net = np.zeros_like(h)
            net[:, :, :-1] -= qx
            net[:, :, 1:] += qx
            net[:, :-1, :] -= qy
            net[:, 1:, :] += qy
            h = np.maximum(h + dt * net / dx, 0.0) + dt * rate
            rains[:, step] += dt * rate
            t += dt
        depths[:, step] = h
    return depths, rains
