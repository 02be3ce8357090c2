"""Byzantine-robust aggregation rules as pure functions over stacked updates.

Every rule takes ``updates``, a tensor of shape ``[n_clients, dim]`` (one row
per client, usually the model delta ``theta_k - theta_global``), plus optional
per-client ``weights``, and returns an :class:`Aggregate`: the aggregated
vector, the effective weight each client got, and which clients were flagged.

Implemented rules (equations written from the papers):

* ``mean``: weighted average (FedAvg, McMahan et al. 2017), the non-robust baseline.
* ``dnc``: Divide-and-Conquer, Shejwalkar & Houmansadr, NDSS 2021, Algorithm 2.
* ``rfa``: geometric median by smoothed Weiszfeld, Pillutla et al., IEEE TSP 2022
  ("Robust Aggregation for Federated Learning"), Algorithm 2.
* ``fltrust``: FLTrust, Cao et al., NDSS 2021, Eq. (1)-(3).

All share the call shape ``fn(updates, weights=None, **params) -> Aggregate``. They have no
table of names: a scenario names a strategy, and each strategy's declaration
(`testbed.federated.strategies`) calls its rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Aggregate:
    """Result of an aggregation rule.

    ``update`` is the aggregated ``[dim]`` vector, ``weights`` the ``[n]``
    share of the aggregate attributed to each client (zero for removed ones)
    and ``flagged`` the ``[n]`` boolean mask of clients the rule treated as
    malicious.
    """

    update: torch.Tensor
    weights: torch.Tensor
    flagged: torch.Tensor


def _check(updates: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Validate inputs and return float weights normalised to sum to one."""
    if updates.dim() != 2 or updates.shape[0] == 0:
        raise ValueError(f"updates: expected shape [n_clients, dim], got {tuple(updates.shape)}")
    n = updates.shape[0]
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=updates.dtype)
    weights = torch.as_tensor(weights, dtype=updates.dtype).reshape(-1)
    if weights.numel() != n or bool((weights < 0).any()) or float(weights.sum()) <= 0:
        raise ValueError(f"weights: need {n} non-negative values with a positive sum")
    return weights / weights.sum()


def mean(updates: torch.Tensor, weights: torch.Tensor | None = None) -> Aggregate:
    """Weighted average of the rows (FedAvg); flags nobody."""
    w = _check(updates, weights)
    flagged = torch.zeros(updates.shape[0], dtype=torch.bool)
    return Aggregate(w @ updates, w, flagged)


def dnc(
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    num_malicious: int,
    filter_frac: float = 1.0,
    num_iters: int = 1,
    sub_dim: int = 10000,
    generator: torch.Generator | None = None,
) -> Aggregate:
    """Divide-and-Conquer (Shejwalkar & Houmansadr 2021, Algorithm 2).

    Each of ``num_iters`` iterations samples ``sub_dim`` coordinates, centres
    the sub-sampled updates on their mean, takes the top right singular vector
    ``v`` of the centred matrix, scores each client by its squared projection
    ``s_i = <g_i - mu, v>^2`` and keeps the ``n - filter_frac * num_malicious``
    lowest scores. The kept set is the intersection over iterations; the result
    is the (weighted) mean of the kept updates. Defaults ``filter_frac=1``,
    ``num_iters=1``, ``sub_dim=10000`` follow the paper's experiments.
    """
    w = _check(updates, weights)
    n, dim = updates.shape
    if num_malicious < 0:
        raise ValueError(f"num_malicious: must be >= 0, got {num_malicious}")
    if filter_frac <= 0:
        raise ValueError(f"filter_frac: must be > 0, got {filter_frac}")
    if num_iters < 1 or sub_dim < 1:
        raise ValueError(f"num_iters/sub_dim: must be >= 1, got {num_iters}/{sub_dim}")
    n_remove = int(filter_frac * num_malicious)
    if n_remove >= n:
        raise ValueError(f"num_malicious: filter_frac*num_malicious={n_remove} removes all {n} clients")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    good = torch.ones(n, dtype=torch.bool)
    for _ in range(num_iters):
        dims = torch.randperm(dim, generator=gen)[: min(sub_dim, dim)]
        sub = updates[:, dims].to(torch.float64)  # float64: SVD of near-equal rows is fragile
        centred = sub - sub.mean(dim=0)
        v = torch.linalg.svd(centred, full_matrices=False).Vh[0]
        scores = (centred @ v) ** 2
        keep = torch.zeros(n, dtype=torch.bool)
        keep[torch.argsort(scores, stable=True)[: n - n_remove]] = True
        good &= keep
    kept_w = torch.where(good, w, torch.zeros_like(w))
    kept_w = kept_w / kept_w.sum()
    return Aggregate(kept_w @ updates, kept_w, ~good)


def geometric_median(
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    nu: float = 1e-6,
    max_iter: int = 100,
    ftol: float = 1e-6,
) -> Aggregate:
    """Weighted geometric median by smoothed Weiszfeld (RFA, Pillutla et al. 2022).

    Minimises ``sum_i a_i ||z - w_i||``. Each step sets
    ``beta_i = a_i / max(nu, ||z - w_i||)`` and ``z = sum_i beta_i w_i / sum_i beta_i``,
    starting from the weighted mean; it stops when the objective improves by
    less than ``ftol`` (relative) or after ``max_iter`` steps. The returned
    weights are the normalised ``beta`` that produced ``z``; nobody is flagged.
    """
    a = _check(updates, weights)
    if nu <= 0 or max_iter < 1 or ftol < 0:
        raise ValueError(f"nu/max_iter/ftol: need nu>0, max_iter>=1, ftol>=0, got {nu}/{max_iter}/{ftol}")
    pts = updates.to(torch.float64)
    a = a.to(torch.float64)
    z, beta = a @ pts, a
    objective = float(a @ torch.linalg.vector_norm(pts - z, dim=1))
    for _ in range(max_iter):
        dist = torch.linalg.vector_norm(pts - z, dim=1)
        beta = a / torch.clamp(dist, min=nu)  # nu smooths the 1/0 at a data point
        beta = beta / beta.sum()
        z = beta @ pts
        new_objective = float(a @ torch.linalg.vector_norm(pts - z, dim=1))
        converged = abs(objective - new_objective) <= ftol * max(new_objective, 1e-12)
        objective = new_objective
        if converged:
            break
    flagged = torch.zeros(updates.shape[0], dtype=torch.bool)
    return Aggregate(z.to(updates.dtype), beta.to(updates.dtype), flagged)


def fltrust(
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    server_update: torch.Tensor,
) -> Aggregate:
    """FLTrust (Cao et al. 2021): trust = ReLU(cosine) to the server's root-data update.

    ``TS_i = ReLU(cos(g_i, g_0))`` (Eq. 1), each update is rescaled to the
    server update's norm ``g_i * ||g_0|| / ||g_i||`` (Eq. 2), and the result is
    ``sum_i TS_i * rescaled_i / sum_i TS_i`` (Eq. 3). ``weights`` (data sizes)
    are validated but not used, as in the paper. Clients with zero trust are
    flagged; if every trust score is zero the aggregate is the zero vector.
    ``weights`` in the result are the normalised trust scores.
    """
    _check(updates, weights)
    g0 = torch.as_tensor(server_update, dtype=updates.dtype).reshape(-1)
    if g0.numel() != updates.shape[1]:
        raise ValueError(f"server_update: has {g0.numel()} entries, updates have {updates.shape[1]}")
    g0_norm = torch.linalg.vector_norm(g0)
    norms = torch.linalg.vector_norm(updates, dim=1)
    safe = torch.clamp(norms, min=torch.finfo(updates.dtype).tiny)
    cos = (updates @ g0) / (safe * torch.clamp(g0_norm, min=torch.finfo(updates.dtype).tiny))
    trust = torch.relu(torch.where(norms > 0, cos, torch.zeros_like(cos)))
    if float(trust.sum()) <= 0:
        zeros = torch.zeros(updates.shape[0], dtype=updates.dtype)
        return Aggregate(torch.zeros_like(g0), zeros, torch.ones_like(zeros, dtype=torch.bool))
    share = trust / trust.sum()
    # A zero update (a client that uploads the global model back) has nothing to rescale; dividing
    # by its clamped norm would overflow to inf and 0 * inf would make the whole aggregate NaN.
    scale = torch.where(norms > 0, g0_norm / safe, torch.zeros_like(norms))
    rescaled = updates * scale.unsqueeze(1)
    return Aggregate(share @ rescaled, share, trust <= 0)
