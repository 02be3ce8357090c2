"""From Renyi DP to (epsilon, delta)-DP, and epsilon aggregated by graph distance.

Three conversions of an (alpha, r(alpha))-RDP guarantee, each valid for every order:
* Mironov 2017 ("Renyi Differential Privacy", Prop. 3):
      eps = r(alpha) + ln(1/delta) / (alpha - 1)
* Balle et al. 2020 (arXiv 1905.09982, Thm 21), the one used by opacus:
      eps = r(alpha) + ln(1/delta)/(alpha - 1) - ln(alpha)/(alpha - 1) + ln(1 - 1/alpha)
  Checked against opacus 1.6.0 `opacus.accountants.analysis.rdp.get_privacy_spent`,
  which computes exactly this expression and takes the minimum over its order list.
* Bun & Steinke 2016 (zCDP, Prop. 1.3), for r(alpha) = alpha rho:
      eps = rho + 2 sqrt(rho ln(1/delta))
For the PNDP matrices, which are linear in alpha (rho = eps(alpha)/alpha), the best
order has a closed form for Mironov, alpha* = 1 + sqrt(ln(1/delta)/rho), which turns
Mironov into Bun-Steinke exactly; for Balle et al. the derivative of the bound in
alpha is rho - (ln(1/delta) - ln alpha)/(alpha - 1)^2, whose single root (in
(1, alpha*]) is found by a vectorised safeguarded Newton iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.sparse import csgraph

from .accounting import source_index
from .errors import TopologyError
from .walks import adjacency

CONVERSIONS = ("balle", "mironov")
CHUNK = 1 << 20  # entries per vectorised block: bounds temporaries to a few MB each


def _log_inv_delta(delta: float) -> float:
    """ln(1/delta) after checking 0 < delta < 1."""
    if not 0 < delta < 1:
        raise TopologyError(f"delta must be in (0, 1) (got {delta})")
    return float(-np.log(delta))


def _bound(rdp, orders, log_inv_delta: float, method: str):
    """The conversion ``method`` evaluated entrywise (rdp and orders broadcast)."""
    if method == "mironov":
        return rdp + log_inv_delta / (orders - 1)
    if method == "balle":
        return rdp + (log_inv_delta - np.log(orders)) / (orders - 1) + np.log1p(-1.0 / orders)
    raise TopologyError(f"unknown conversion '{method}' (known: {', '.join(CONVERSIONS)})")


def rdp_to_dp(rdp, orders, delta: float, *, method: str = "balle") -> tuple[float, float]:
    """(epsilon, best order) minimising the conversion over a grid of RDP orders > 1.

    With ``method="balle"`` this reproduces opacus' ``get_privacy_spent``, except that a
    negative epsilon is raised to 0 (a weaker, still valid statement).
    """
    orders, rdp = np.atleast_1d(np.asarray(orders, float)), np.atleast_1d(np.asarray(rdp, float))
    if orders.shape != rdp.shape or np.any(orders <= 1):
        raise TopologyError("orders and rdp must have the same length and every order must be > 1")
    eps = _bound(rdp, orders, _log_inv_delta(delta), method)
    if np.all(np.isnan(eps)):
        return float("inf"), float("nan")  # as opacus: no order gives a finite guarantee
    best = int(np.nanargmin(eps))
    return max(0.0, float(eps[best])), float(orders[best])


def zcdp_to_dp(rho, delta: float) -> np.ndarray:
    """Bun-Steinke 2016 Prop. 1.3: rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP."""
    rho = np.clip(np.asarray(rho, dtype=np.float64), 0.0, None)
    return rho + 2.0 * np.sqrt(rho * _log_inv_delta(delta))


def linear_rdp_to_dp(rho, delta: float, *, method: str = "balle", max_order: float | None = None):
    """Per-entry (epsilon, best order) for r(alpha) = alpha * rho, optimised over all
    real orders 1 < alpha <= max_order (both bounds are unimodal in alpha, so clipping
    the unconstrained optimum to max_order is optimal). rho <= 0 gives epsilon 0.

    Use ``max_order`` = `topologies.accounting.max_valid_order` to respect the order
    condition of the random-walk bound. Works in chunks, so an n x n matrix needs
    only the two n x n outputs of memory.
    """
    log_inv = _log_inv_delta(delta)
    if method not in CONVERSIONS:
        raise TopologyError(f"unknown conversion '{method}' (known: {', '.join(CONVERSIONS)})")
    if max_order is not None and not max_order > 1:
        raise TopologyError(f"max_order must be > 1 (got {max_order})")
    flat = np.asarray(rho, dtype=np.float64).reshape(-1)
    eps, order = np.empty_like(flat), np.empty_like(flat)
    for start in range(0, flat.size, CHUNK):
        part = slice(start, start + CHUNK)
        eps[part], order[part] = _linear_chunk(flat[part], log_inv, method, max_order)
    shape = np.shape(rho)
    return eps.reshape(shape), order.reshape(shape)


def _linear_chunk(rho: np.ndarray, log_inv: float, method: str, max_order: float | None):
    """`linear_rdp_to_dp` on a 1-D chunk."""
    positive = rho > 0
    safe = np.where(positive, rho, 1.0)
    order = 1.0 + np.sqrt(log_inv / safe)  # Mironov's optimum; upper end of Balle's bracket
    if method == "balle":
        order = _balle_order(safe, log_inv, order)
    if max_order is not None:
        order = np.minimum(order, max_order)
    eps = np.maximum(_bound(order * safe, order, log_inv, method), 0.0)
    return np.where(positive, eps, 0.0), np.where(positive, order, np.inf)


def _balle_order(rho: np.ndarray, log_inv: float, high: np.ndarray, iters: int = 100) -> np.ndarray:
    """Root of g(a) = rho (a-1)^2 + ln a - ln(1/delta) in (1, high]: g is increasing,
    g(1) < 0 <= g(high). Newton steps that leave the bracket are replaced by bisection;
    each entry stops on its own, so the result does not depend on the chunking."""
    low, high, x = np.ones_like(rho), high.copy(), high.copy()
    done = np.zeros(rho.shape, dtype=bool)
    for _ in range(iters):
        g = rho * (x - 1.0) ** 2 + np.log(x) - log_inv
        low, high = np.where(g < 0, x, low), np.where(g >= 0, x, high)
        newton = x - g / (2.0 * rho * (x - 1.0) + 1.0 / x)
        inside = (newton >= low) & (newton <= high)
        x_next = np.where(done, x, np.where(inside, newton, 0.5 * (low + high)))
        done |= np.abs(x_next - x) <= 1e-12 * x
        x = x_next
        if done.all():
            break
    return x


@dataclass(frozen=True)
class DistanceProfile:
    """Epsilon grouped by shortest-path distance d >= 1 (one entry per distance present)."""

    distance: np.ndarray
    mean: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    count: np.ndarray


def epsilon_by_distance(eps, graph: nx.Graph, sources=None) -> DistanceProfile:
    """Mean, min and max of eps[u, v] over pairs (u in sources, v) at each hop distance.

    ``eps`` has one row per source (all nodes by default, or the rows of ``sources``
    in that order, as returned by `random_walk_pndp(..., sources=...)`). Sources are
    processed in blocks, so memory stays O(n) beyond ``eps`` itself.
    """
    n = graph.number_of_nodes()
    index = source_index(sources, n)
    eps = np.asarray(eps, dtype=np.float64)
    if eps.shape != (index.size, n):
        raise TopologyError(f"eps has shape {eps.shape}, expected {(index.size, n)}")
    adj = adjacency(graph)
    total, count = np.zeros(n), np.zeros(n, dtype=np.int64)
    low, high = np.full(n, np.inf), np.full(n, -np.inf)
    block = max(1, CHUNK // n)
    for start in range(0, index.size, block):
        hops = csgraph.shortest_path(
            adj, unweighted=True, directed=False, indices=index[start : start + block]
        )
        _accumulate(hops, eps[start : start + block], total, count, low, high)
    present = np.flatnonzero(count)
    return DistanceProfile(
        distance=present,
        mean=total[present] / count[present],
        minimum=low[present],
        maximum=high[present],
        count=count[present],
    )


def _accumulate(hops, eps, total, count, low, high) -> None:
    """Add one block of (distance, eps) pairs at distance >= 1 to the running statistics."""
    keep = np.isfinite(hops) & (hops > 0)
    dist, vals = hops[keep].astype(np.int64), eps[keep]
    order = np.argsort(dist, kind="stable")
    dist, vals = dist[order], vals[order]
    distance, starts, counts = np.unique(dist, return_index=True, return_counts=True)
    if distance.size == 0:
        return
    total[distance] += np.add.reduceat(vals, starts)
    count[distance] += counts
    low[distance] = np.minimum(low[distance], np.minimum.reduceat(vals, starts))
    high[distance] = np.maximum(high[distance], np.maximum.reduceat(vals, starts))
