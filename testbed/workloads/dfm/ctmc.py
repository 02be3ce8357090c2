"""The masking discrete flow of Campbell et al. (2024), its eta-sampler, and the D3PM baseline.

Per dimension the probability path is ``p_{t|1}(x_t | x_1) = t delta(x_1) + (1 - t) delta(MASK)``
(t = 0 all masked, t = 1 clean). Only a denoiser ``p_theta(x_1 | x_t)`` is trained, by
cross-entropy on the masked dimensions; the CTMC rates are built from it at sampling time:

* the minimal rate of the path: ``R*(MASK -> j) = p_theta(j | x_t) / (1 - t)``;
* plus a detailed-balance rate of strength ``eta``: ``MASK -> j`` at ``eta t / (1 - t)`` and
  ``j -> MASK`` at ``eta``, which satisfies ``R(M->j) p_t(M) = R(j->M) p_t(j)`` and therefore leaves
  every marginal ``p_t`` unchanged. The total is unmask ``(1 + eta t) / (1 - t)``, re-mask ``eta``.

The D3PM baseline (Austin et al. 2021, absorbing state) is the discrete-time chain with
``T`` steps and ``q(x_k masked) = k / T``; its reverse step unmasks a masked token with probability
``1 / k`` to a draw of ``p_theta(x_0 | x_k)``, and it is trained with its variational bound
(the per-step KL is ``-(1/k) log p_theta(x_0 | x_k)`` per masked token) plus ``lambda`` times the
cross-entropy (the hybrid loss).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

# A denoiser maps (x_t [n, D] long, t [n] float) to probabilities p(x_1 | x_t) of shape [n, D, S].
Denoiser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def corrupt(x1: torch.Tensor, t: torch.Tensor, mask_id: int, generator: torch.Generator) -> torch.Tensor:
    """A draw of ``p_{t|1}``: each token is kept with probability t and masked otherwise."""
    masked = torch.rand(x1.shape, generator=generator) >= t[:, None]
    return torch.where(masked, torch.full_like(x1, mask_id), x1)


def dfm_loss(logits: torch.Tensor, x1: torch.Tensor, x_t: torch.Tensor, mask_id: int) -> torch.Tensor:
    """DFM training loss: cross-entropy of ``p_theta(x_1 | x_t)`` on the masked dimensions only."""
    masked = x_t == mask_id
    per_token = F.cross_entropy(logits.transpose(1, 2), x1, reduction="none")
    return (per_token * masked).sum() / masked.sum().clamp(min=1)


def d3pm_loss(logits: torch.Tensor, x1: torch.Tensor, x_t: torch.Tensor, k: torch.Tensor, steps: int,
              mask_id: int, ce_weight: float) -> torch.Tensor:
    """D3PM hybrid loss for the absorbing chain, per sequence: ``L_vb = T E_k[L_{k-1}]`` plus ``lambda`` CE."""
    masked = (x_t == mask_id).float()
    per_token = F.cross_entropy(logits.transpose(1, 2), x1, reduction="none") * masked
    # KL(q(x_{k-1} | x_k, x_0) || p_theta(x_{k-1} | x_k)) = -(1/k) log p_theta(x_0 | x_k) per masked token
    vb = steps * (per_token.sum(1) / k).mean()
    return vb + ce_weight * per_token.sum(1).mean()


def categorical(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row of ``probs [..., S]`` by inverting the cumulative distribution (faster than multinomial)."""
    u = torch.rand(probs.shape[:-1], generator=generator)[..., None]
    return (probs.cumsum(-1) < u * probs.sum(-1, keepdim=True)).sum(-1).clamp(max=probs.shape[-1] - 1)


def masking_rates(t: float, eta: float) -> tuple[float, float]:
    """``(unmask, remask)``: MASK -> j at ``unmask * p(j | x_t)`` and j -> MASK at ``remask``, at time t."""
    return (1.0 + eta * t) / (1.0 - t), eta


def rate_matrix(p_clean: torch.Tensor, t: float, eta: float) -> torch.Tensor:
    """The generator of one dimension given ``p(x_1)`` (states 0..S-1, then MASK): rows sum to zero."""
    unmask, remask = masking_rates(t, eta)
    states = len(p_clean)
    rates = torch.zeros(states + 1, states + 1, dtype=p_clean.dtype)
    rates[states, :states] = unmask * p_clean
    rates[:states, states] = remask
    return rates - torch.diag(rates.sum(1))


def unmask_probability(t: float, dt: float, eta: float) -> float:
    """Euler step probability of leaving MASK between t and t + dt: ``dt (1 + eta t) / (1 - t)``, at most 1."""
    return min(1.0, dt * masking_rates(t, eta)[0])


def masking_step(x: torch.Tensor, probs: torch.Tensor, t: float, dt: float, eta: float, last: bool,
                 mask_id: int, generator: torch.Generator) -> torch.Tensor:
    """One Euler (tau-leaping) step of the masking CTMC from t to t + dt, every dimension independently.

    A masked dimension that jumps lands on a draw of ``p_theta(x_1 | x_t)`` (``probs``); an
    unmasked one is re-masked with probability ``eta dt``. The last step unmasks what is left.
    """
    draw = categorical(probs, generator)
    is_masked = x == mask_id
    if last:
        return torch.where(is_masked, draw, x)
    u = torch.rand(x.shape, generator=generator)
    x = torch.where(is_masked & (u < unmask_probability(t, dt, eta)), draw, x)
    remask = min(1.0, dt * masking_rates(t, eta)[1])
    return torch.where(~is_masked & (u < remask), torch.full_like(x, mask_id), x)


@torch.no_grad()
def dfm_sample(denoiser: Denoiser, count: int, length: int, mask_id: int, steps: int, eta: float,
               generator: torch.Generator) -> torch.Tensor:
    """Euler simulation of the CTMC with rates from ``denoiser``, from all-MASK at t = 0 to t = 1."""
    x = torch.full((count, length), mask_id, dtype=torch.long)
    dt = 1.0 / steps
    for step in range(steps):
        probs = denoiser(x, torch.full((count,), step * dt))
        x = masking_step(x, probs, step * dt, dt, eta, step == steps - 1, mask_id, generator)
    return x


@torch.no_grad()
def d3pm_sample(denoiser: Denoiser, count: int, length: int, mask_id: int, steps: int,
                generator: torch.Generator) -> torch.Tensor:
    """Ancestral sampling of the absorbing D3PM with ``steps`` = T: from k = T (all masked) down to 0."""
    x = torch.full((count, length), mask_id, dtype=torch.long)
    for k in range(steps, 0, -1):
        probs = denoiser(x, torch.full((count,), 1.0 - k / steps))
        draw = categorical(probs, generator)
        unmask = (x == mask_id) & (torch.rand(count, length, generator=generator) < 1.0 / k)
        x = torch.where(unmask, draw, x)
    return x


@torch.no_grad()
def one_shot_sample(denoiser: Denoiser, count: int, length: int, mask_id: int,
                    generator: torch.Generator) -> torch.Tensor:
    """Every token drawn at once from ``p_theta(x_1 | all MASK)``: no CTMC, no dependencies between tokens."""
    x = torch.full((count, length), mask_id, dtype=torch.long)
    probs = denoiser(x, torch.zeros(count))
    return categorical(probs, generator)
