"""DDDM's direct denoiser and its sampler, and the few-step diffusion baseline (Zhang et al. 2024, section 3).

VP diffusion with the DDPM linear schedule: ``x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps``.

* DDDM: one network estimates the PF-ODE solution from t to 0 directly,
  ``f_theta(x0_hat, x_t, t) = x_t - F_theta(x0_hat, x_t, t)``, conditioned on an earlier estimate
  ``x0_hat`` of the clean sample. Sampling (Algorithm 2) fixes ``x_T`` and ``t = T``, starts from
  ``x0_hat ~ N(0, I)`` and iterates ``x0_hat <- f_theta(x0_hat, x_T, T)``; the number of
  iterations is the number of function evaluations. Training has two conditionings:

  - ``self`` (default): the condition is computed from the *same* ``x_t`` in a first, gradient-free
    pass started where the sampler starts (``f(z, x_t, t)``, ``z ~ N(0, I)``); half of each batch is
    conditioned on ``z`` itself (the sampler's first step), half on that first estimate (its later
    steps), as in Analog Bits' self-conditioning. The condition then carries nothing about ``x_0``
    that ``x_t`` does not.
  - ``buffer`` (the earlier reading, kept to show its flaw): one estimate per training sample, from
    N(0, I), refreshed with every visit under a fresh ``x_t``. The stored estimate ends up near the
    sample's own clean point, so the network learns to copy it rather than denoise: it leaks the
    target (:func:`leak_errors` measures it).

  The loss is ``w d(f, x_0) + (1 - w) d(f, x0_hat)`` as in the released code, the second term only
  where ``x0_hat`` is a model estimate (a fixed-point term: one more iteration should not move it);
  ``w = 1`` drops it, and the code's schedule is ``w = 1 / (epoch + 1)``.
* Baseline: the same network without the ``x0_hat`` input (an x_0-predicting diffusion model),
  trained with the same metric and sampled with deterministic DDIM on an even grid of n steps.

One-step quality needs a coupling: at ``t = T`` the noise ``x_T`` is almost independent of ``x_0``
(``abar_T`` about 4e-5), so whatever the condition, as long as it is computed from ``x_T`` and fresh
noise, the minimiser of ``E d(f, x_0)`` is one point (the data's mean under the squared distance)
for every ``x_T``. A one-step sampler from independent ``(x_0, noise)`` pairs therefore needs a
noise-to-data coupling (an ODE pairing, as distillation has), which the paper's description lacks.
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


def _guided_loss(metric: Metric, estimate: torch.Tensor, x0: torch.Tensor, condition: torch.Tensor,
                 is_estimate: torch.Tensor, guide_weight: float) -> torch.Tensor:
    """``w d(f, x_0) + (1 - w) d(f, x0_hat)``, the second term only where ``x0_hat`` is a model estimate."""
    loss = guide_weight * metric(estimate, x0)
    if guide_weight < 1:
        loss = loss + (1 - guide_weight) * is_estimate.float() * metric(estimate, condition)
    return loss.mean()


def dddm_step(model: Denoiser, x0: torch.Tensor, estimates: torch.Tensor, abar: torch.Tensor, metric: Metric,
              generator: torch.Generator, clip: float | None = None,
              guide_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Buffer conditioning on a batch: (loss, new estimates to write back into the per-sample buffer).

    For bounded data (images in [-1, 1]) the stored estimate is clipped to the data range, as the
    sampler clips it: a metric on features (Pseudo-LPIPS) does not bound the estimate's scale, and
    feeding unbounded estimates back diverges.
    """
    t = torch.randint(0, len(abar), (len(x0),), generator=generator)
    x_t = noisy(x0, t, abar, torch.randn(x0.shape, generator=generator))
    estimate = model(x_t, t, estimates)
    loss = _guided_loss(metric, estimate, x0, estimates, torch.ones(len(x0), dtype=torch.bool), guide_weight)
    return loss, _clipped(estimate.detach(), clip)


def self_conditioned_step(model: Denoiser, x0: torch.Tensor, abar: torch.Tensor, metric: Metric,
                          generator: torch.Generator, clip: float | None = None,
                          guide_weight: float = 1.0) -> torch.Tensor:
    """Self conditioning on a batch: the condition is the start ``z`` or ``f(z, x_t, t)`` from the same ``x_t``."""
    t = torch.randint(0, len(abar), (len(x0),), generator=generator)
    x_t = noisy(x0, t, abar, torch.randn(x0.shape, generator=generator))
    start = torch.randn(x0.shape, generator=generator)
    with torch.no_grad():
        first = _clipped(model(x_t, t, start), clip)
    is_estimate = torch.rand(len(x0), generator=generator) < 0.5
    condition = torch.where(is_estimate[:, None], first, start)
    return _guided_loss(metric, model(x_t, t, condition), x0, condition, is_estimate, guide_weight)


@torch.no_grad()
def leak_errors(model: Denoiser, x0: torch.Tensor, t: int, abar: torch.Tensor, generator: torch.Generator,
                conditions: torch.Tensor | None = None, clip: float | None = None) -> tuple[float, float]:
    """Mean error ``|f - x_0|`` at time ``t`` given each sample's own condition, and given another sample's.

    ``conditions``: the buffer's estimates of ``x0`` (buffer conditioning); ``None`` computes them the
    way self conditioning does, from the same ``x_t``. A condition that carries only what ``x_t``
    carries gives errors of the same size; one that holds the target (the buffer's) fails badly
    when it is swapped for another sample's.
    """
    times = torch.full((len(x0),), t)
    x_t = noisy(x0, times, abar, torch.randn(x0.shape, generator=generator))
    if conditions is None:
        conditions = _clipped(model(x_t, times, torch.randn(x0.shape, generator=generator)), clip)
    others = conditions.roll(1, dims=0)
    own = (model(x_t, times, conditions) - x0).norm(dim=1).mean()
    swapped = (model(x_t, times, others) - x0).norm(dim=1).mean()
    return float(own), float(swapped)


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
