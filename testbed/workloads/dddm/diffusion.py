"""DDDM's direct denoiser and its sampler, and the few-step diffusion baseline (Zhang et al. 2024, section 3).

VP diffusion with the DDPM linear schedule: ``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps``.

* DDDM: one network estimates the PF-ODE solution from t to 0 directly,
  ``f_theta(x0_hat, x_t, t) = x_t - F_theta(x0_hat, x_t, t)``, conditioned on an earlier estimate
  ``x0_hat`` of the clean sample. Training (Algorithm 1) keeps one estimate per training sample,
  initialised from N(0, I): each visit draws a fresh t and noise, regresses ``f_theta`` on ``x_0``
  with the metric d, and writes the new estimate back. Sampling (Algorithm 2) fixes ``x_T`` and
  ``t = T``, starts from ``x0_hat ~ N(0, I)`` and iterates ``x0_hat <- f_theta(x0_hat, x_T, T)``;
  the number of iterations is the number of function evaluations.
* Baseline: the same network without the ``x0_hat`` input (an x_0-predicting diffusion model),
  trained with the same metric and sampled with deterministic DDIM on an even grid of n steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # per-sample distance d(a, b)


def alpha_bars(steps: int) -> torch.Tensor:
    """``abar_t`` of the DDPM linear schedule (beta from 1e-4 to 0.02 over 1000 steps, rescaled to ``steps``)."""
    scale = 1000 / steps
    betas = torch.linspace(scale * 1e-4, scale * 0.02, steps, dtype=torch.float64)
    return torch.cumprod(1 - betas, 0).float()


def noisy(x0: torch.Tensor, t: torch.Tensor, abar: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps``."""
    a = abar[t][:, None]
    return a.sqrt() * x0 + (1 - a).sqrt() * noise


def time_features(t: torch.Tensor, steps: int, dim: int = 32) -> torch.Tensor:
    """Sinusoidal embedding of the integer time ``t in [0, steps)``."""
    frequencies = torch.exp(torch.arange(dim // 2) * (-math.log(steps) / (dim // 2 - 1)))
    angles = t[:, None].float() * frequencies[None]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def pseudo_huber(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """``sqrt(|a - b|^2 + c^2) - c`` per sample."""
    return ((a - b) ** 2).sum(1).add(c * c).sqrt() - c


class Denoiser(nn.Module):
    """``f = x_t - F([x_t, x0_hat?, emb(t)])``: a direct x_0 estimate (with ``x0_hat`` for DDDM)."""

    def __init__(self, dim: int, hidden: int, steps: int, conditioned: bool):
        super().__init__()
        self.steps, self.conditioned = steps, conditioned
        width = dim * (2 if conditioned else 1) + 32
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, dim))

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, estimate: torch.Tensor | None = None) -> torch.Tensor:
        features = [x_t]
        if self.conditioned:
            assert estimate is not None  # a conditioned denoiser is given its estimate
            features.append(estimate)
        features.append(time_features(t, self.steps))
        return x_t - self.net(torch.cat(features, dim=1))


def _clipped(x: torch.Tensor, clip: float | None) -> torch.Tensor:
    return x if clip is None else x.clamp(-clip, clip)


def dddm_step(model: Denoiser, x0: torch.Tensor, estimates: torch.Tensor, abar: torch.Tensor, metric: Metric,
              generator: torch.Generator, clip: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1 on a batch: (loss, new estimates to write back into the per-sample buffer).

    For bounded data (images in [-1, 1]) the stored estimate is clipped to the data range, as the
    sampler clips it: a metric on features (Pseudo-LPIPS) does not bound the estimate's scale, and
    feeding unbounded estimates back diverges.
    """
    t = torch.randint(0, len(abar), (len(x0),), generator=generator)
    x_t = noisy(x0, t, abar, torch.randn(x0.shape, generator=generator))
    estimate = model(x_t, t, estimates)
    return metric(estimate, x0).mean(), _clipped(estimate.detach(), clip)


def baseline_step(model: Denoiser, x0: torch.Tensor, abar: torch.Tensor, metric: Metric,
                  generator: torch.Generator) -> torch.Tensor:
    """The baseline's loss: the same metric between the x_0 prediction and x_0."""
    t = torch.randint(0, len(abar), (len(x0),), generator=generator)
    x_t = noisy(x0, t, abar, torch.randn(x0.shape, generator=generator))
    return metric(model(x_t, t), x0).mean()


@torch.no_grad()
def dddm_sample(model: Denoiser, count: int, dim: int, iterations: int, generator: torch.Generator,
                clip: float | None = None) -> torch.Tensor:
    """Algorithm 2: fixed ``x_T``, ``t = T``, ``x0_hat`` fed back ``iterations`` times from N(0, I)."""
    x_T = torch.randn(count, dim, generator=generator)
    estimate = torch.randn(count, dim, generator=generator)
    last = torch.full((count,), model.steps - 1)
    for _ in range(iterations):
        estimate = _clipped(model(x_T, last, estimate), clip)
    return estimate


@torch.no_grad()
def ddim_sample(model: Denoiser, abar: torch.Tensor, count: int, dim: int, steps: int,
                generator: torch.Generator) -> torch.Tensor:
    """Deterministic DDIM with ``steps`` network evaluations on an even grid from T - 1 down to 0."""
    grid = torch.linspace(len(abar) - 1, 0, steps + 1).round().long()
    x = torch.randn(count, dim, generator=generator)
    for i in range(steps):
        t, s = grid[i], grid[i + 1]
        x0 = model(x, t.expand(count))
        if i == steps - 1:
            return x0
        eps = (x - abar[t].sqrt() * x0) / (1 - abar[t]).sqrt()
        x = abar[s].sqrt() * x0 + (1 - abar[s]).sqrt() * eps
    return x
