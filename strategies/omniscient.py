"""Omniscient model-poisoning attacks: LIE, Min-Max and Min-Sum.

These attacks craft the malicious upload from the statistics of the round's
**benign** updates. In a real deployment an attacker only sees the updates of
the clients it controls; here the adversary is *omniscient*: it is handed all
benign updates of the round (the strongest setting, used in the papers'
main experiments). Inputs are update vectors (``theta_k - theta_global``),
stacked as ``[n, dim]``; every malicious client sends the same crafted row.

* LIE, "A Little Is Enough" (Baruch et al., NeurIPS 2019), Sec. 4:
  ``mal = mu - z * sigma`` with ``s = floor(n/2 + 1) - f`` and
  ``z = Phi^{-1}((n - s) / n)`` (``Phi`` the standard normal CDF).
* Min-Max and Min-Sum (Shejwalkar & Houmansadr, NDSS 2021), Eq. (4)-(5) and
  Algorithm 1: ``mal = mu - gamma * dev`` with ``dev`` the unit vector
  ``mu/||mu||``, the coordinate std ``sigma`` or ``sign(mu)``; ``gamma`` is the
  largest value found by a halving search such that the malicious update's
  maximum distance (Min-Max) or sum of squared distances (Min-Sum) to the
  benign updates does not exceed the largest such value among benign updates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from .attack_base import attack, unchecked

if TYPE_CHECKING:  # the declarations import no torch (validation reads them); the functions do
    import torch

DIRECTIONS = ("unit", "std", "sign")


def _benign_stats(benign: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinate-wise mean and (unbiased) standard deviation of the benign rows."""
    if benign.dim() != 2 or benign.shape[0] < 2:
        shape = tuple(benign.shape)
        raise ValueError(f"benign: need at least 2 benign updates of shape [n, dim], got {shape}")
    return benign.mean(dim=0), benign.std(dim=0)


def lie_z(num_clients: int, num_malicious: int) -> float:
    """Baruch et al.'s ``z_max`` for ``n`` clients of which ``f`` are malicious."""
    import torch

    if not 0 < num_malicious < num_clients:
        raise ValueError(f"num_malicious: need 0 < f < n, got f={num_malicious}, n={num_clients}")
    supporters = math.floor(num_clients / 2 + 1) - num_malicious
    quantile = (num_clients - supporters) / num_clients
    quantile = min(max(quantile, 1e-6), 1 - 1e-6)  # keeps the inverse CDF finite
    return float(torch.special.ndtri(torch.tensor(quantile, dtype=torch.float64)))


@attack("model", omniscient=True, check=unchecked)
def lie(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    z: float | None = None,
    num_clients: int | None = None,
) -> torch.Tensor:
    """LIE: every malicious row becomes ``mean - z * std`` of the benign updates.

    ``z`` defaults to :func:`lie_z` with ``f = len(malicious)`` and
    ``n = num_clients`` (default: benign plus malicious rows).
    """
    mu, sigma = _benign_stats(benign)
    m = malicious.shape[0]
    if z is None:
        z = lie_z(num_clients if num_clients is not None else benign.shape[0] + m, m)
    return (mu - z * sigma).expand(m, -1).clone()


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: unknown {direction!r}; valid: {list(DIRECTIONS)}")


def _check_search(gamma_init: float, tol: float) -> None:
    if gamma_init <= 0 or tol <= 0:
        raise ValueError(f"gamma_init/tol: must be > 0, got {gamma_init}/{tol}")


def _check_optimised(direction: str, gamma_init: float, tol: float) -> None:
    """Min-Max's and Min-Sum's values, in the order their run meets them."""
    _check_direction(direction)
    _check_search(gamma_init, tol)


def _deviation(mu: torch.Tensor, sigma: torch.Tensor, direction: str) -> torch.Tensor:
    """The perturbation direction ``dev`` (the paper's ``-grad_p``)."""
    import torch

    _check_direction(direction)
    if direction == "unit":
        return mu / torch.clamp(torch.linalg.vector_norm(mu), min=torch.finfo(mu.dtype).tiny)
    if direction == "std":
        return sigma
    return torch.sign(mu)


def _max_distance(candidate: torch.Tensor, benign: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.linalg.vector_norm(benign - candidate, dim=1).max()


def _sum_sq_distance(candidate: torch.Tensor, benign: torch.Tensor) -> torch.Tensor:
    import torch

    return (torch.linalg.vector_norm(benign - candidate, dim=1) ** 2).sum()


def _halving_search(feasible: Callable[[float], bool], gamma_init: float, tol: float) -> float:
    """Largest feasible ``gamma`` found by the paper's step-halving search.

    Starts at ``gamma_init``; after each test the step halves and ``gamma``
    moves up if feasible, down otherwise. ``gamma = 0`` (the benign mean) is
    always feasible, so 0 is the fallback. Reachable range: ``[0, 2*gamma_init)``.
    """
    _check_search(gamma_init, tol)
    gamma, step, best = gamma_init, gamma_init / 2, 0.0
    while step > tol:
        if feasible(gamma):
            best = gamma
            gamma += step
        else:
            gamma -= step
        step /= 2
    return best


def _optimised(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    direction: str,
    gamma_init: float,
    tol: float,
    *,
    pick: Callable[[list[float]], float] = max,
    search: Callable[[Callable[[float], bool], float, float], float] = _halving_search,
) -> torch.Tensor:
    """Shared body of Min-Max / Min-Sum: the threshold is ``pick`` (the paper's maximum) of the benign
    updates' ``objective``; ``search`` finds the largest feasible ``gamma`` (the MarsFL variants,
    `testbed.strategies.marsfl`, pass their own threshold and search)."""
    mu, sigma = _benign_stats(benign)
    dev = _deviation(mu, sigma, direction)
    threshold = pick([float(objective(b, benign)) for b in benign])

    def feasible(gamma: float) -> bool:
        return float(objective(mu - gamma * dev, benign)) <= threshold

    gamma = search(feasible, gamma_init, tol)
    return (mu - gamma * dev).expand(malicious.shape[0], -1).clone()


@attack("model", omniscient=True, check=_check_optimised)
def min_max(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    direction: str = "std",
    gamma_init: float = 10.0,
    tol: float = 1e-5,
) -> torch.Tensor:
    """Min-Max: ``max_i ||mal - b_i|| <= max_{i,j} ||b_i - b_j||`` (Shejwalkar & Houmansadr Eq. 4)."""
    return _optimised(malicious, benign, _max_distance, direction, gamma_init, tol)


@attack("model", omniscient=True, check=_check_optimised)
def min_sum(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    direction: str = "std",
    gamma_init: float = 10.0,
    tol: float = 1e-5,
) -> torch.Tensor:
    """Min-Sum: ``sum_i ||mal - b_i||^2 <= max_i sum_j ||b_i - b_j||^2`` (Shejwalkar & Houmansadr Eq. 5)."""
    return _optimised(malicious, benign, _sum_sq_distance, direction, gamma_init, tol)
