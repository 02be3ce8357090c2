"""Pairwise network DP (PNDP) of random-walk DP-SGD, in Renyi form, and the local-DP loss.

Setting (Cyffers, Bellet, Upadhyay, ICML 2024, arXiv 2402.07471, "RW DP-SGD"): one
token walks T steps on a symmetric doubly stochastic W; the holder adds N(0, sigma^2)
noise to a gradient of l2-sensitivity Delta (``sensitivity``) and forwards the token
to v with probability W[u, v]. ``eps[u, v]`` bounds the Renyi divergence of order
alpha of v's view between datasets that differ in all of u's data (u -> v leakage).

Finite-sum form (R1), derived here term by term:
    eps_{u->v}(alpha) = N_u * (alpha Delta^2 / sigma^2) * sum_{t=1..T} (W^t)[u,v] / t
* N_u = T/n: expected visits of u under the uniform stationary law.
* (W^t)[u,v] / t: v first sees u's contribution after t noisy steps with probability
  <= (W^t)[u,v]; privacy amplification by iteration (Feldman et al. 2018) then gives
  alpha Delta^2 / (2 sigma^2 t); weak convexity of the Renyi divergence over the
  mixture in t costs a factor (1 + c) <= 2, provided every component is
  <= c/(alpha - 1), i.e. sigma^2 >= Delta^2 alpha (alpha - 1) / 2 (`max_valid_order`).
Closed form (R2), the matrix-logarithm expression of the paper's main theorem:
    eps_{u->v}(alpha) = alpha Delta^2 T H_T / (sigma^2 n^2)
                        + alpha Delta^2 T / (sigma^2 n) * [-ln(I - W + 11^T/n)]_{uv}
It follows from (R1) with W^t = 11^T/n + sum_{k>=2} lambda_k^t phi_k phi_k^T and
sum_{t>=1} lambda^t/t = -ln(1 - lambda): (R2) - (R1) = N_u alpha Delta^2/sigma^2 *
sum_k (sum_{t>T} lambda_k^t/t) phi_k phi_k^T, whose entries are bounded by
`closed_form_tail_bound`. On the complete graph (W = 11^T/n) both give
alpha Delta^2 T H_T / (sigma^2 n^2) for every pair u != v.

What was verified, and what was not: the PDF of arXiv 2402.07471 could not be read
from this environment (only its abstract), so the theorem number and constants were
NOT checked against the paper. (R1) was derived here; (R2) was derived from (R1)
and agrees with the authors' released code (which PN-f-DP's copy labels "Theorem 3
of arXiv 2402.07471"), except that the DPrandomwalk code writes ln T where the exact
stationary sum gives H_T = sum_{t<=T} 1/t (kept here: H_T > ln T, so ln T would not be
a bound). The constant alpha Delta^2 / sigma^2 per unit weight (not alpha/(2 sigma^2))
and the condition on sigma come from the derivation above, not from the PDF.
"""

from __future__ import annotations

import numbers
from typing import cast

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.special import digamma

from ._checks import require_int
from .abandonable import abandonable
from .chebyshev import graph_term_rows, log_series, spectrum_interval
from .errors import TopologyError
from .spectral import SPARSE_SPECTRUM_FROM, is_sparse_enough, spectral_gap
from .walks import validate_walk

METHODS = ("closed_form", "finite_sum", "hitting_time")


def harmonic_number(T: int) -> float:
    """H_T = sum_{t=1..T} 1/t, as digamma(T+1) + Euler's gamma (exact to float precision)."""
    return float(digamma(require_int("T", T, 0) + 1) + np.euler_gamma)


def require_positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite real > 0, else raise `TopologyError`."""
    # cast: typeshed's numbers.Real does not declare comparisons with int (no runtime effect).
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < cast(float, value) < np.inf:
        raise TopologyError(f"{name} must be a finite number > 0 (got {value!r})")
    return float(value)


def require_order(alpha: object) -> float:
    """Return the Renyi order as a float if it is > 1, else raise `TopologyError`."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 1 < cast(float, alpha) < np.inf:
        raise TopologyError(f"Renyi order alpha must be a finite number > 1 (got {alpha!r})")
    return float(alpha)


def max_valid_order(sigma: float, sensitivity: float = 1.0) -> float:
    """Largest alpha with alpha (alpha - 1) <= 2 sigma^2 / Delta^2: the orders for which
    the factor 2 of weak convexity in (R1) is justified (derived here, see module doc)."""
    sigma = require_positive("sigma", sigma)
    sensitivity = require_positive("sensitivity", sensitivity)
    ratio = 2.0 * sigma**2 / sensitivity**2
    return 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * ratio))


GRAPH_TERM_METHODS = ("auto", "eigh", "chebyshev")
# Measured here (2 cores, benchmarks/bench_decentralized.py, the Erdos-Renyi walk at n = 10^4):
# eigh took 287 CPU-s for its 4 n^3 (7.2e-11 s each), the series 70.7 CPU-s for its
# K (nnz + 4 n) n with K = 53 (5.1e-10 s each, scipy's sparse product): a ratio of 7.
_EIGH_FLOP_ADVANTAGE = 7.0


def random_walk_graph_term(matrix, *, sources=None, method: str = "auto", tol: float = 1e-12) -> np.ndarray:
    """Rows ``sources`` (default: all) of L = -ln(I - W + 11^T/n) for a symmetric doubly
    stochastic ergodic W (the graph term of (R2)).

    ``method="eigh"``: one `scipy.linalg.eigh` of I - W + 11^T/n, O(n^3) time and about four
    n x n float64 arrays whatever rows are asked. ``"chebyshev"``: a Chebyshev expansion on the
    sparse W (`topologies.chebyshev`), O(K nnz) per row and no n x n array beyond the result,
    each entry within ``tol`` of the exact value. ``"auto"`` takes the cheaper by an operation
    count (K from the spectrum, the eigendecomposition credited with its BLAS speed)."""
    walk = validate_walk(matrix, doubly_stochastic=True, symmetric=True)
    if method not in GRAPH_TERM_METHODS:
        raise TopologyError(f"unknown graph-term method '{method}' (known: {', '.join(GRAPH_TERM_METHODS)})")
    n = walk.shape[0]
    index = source_index(sources, n)
    if method == "auto":
        method = "chebyshev" if _chebyshev_is_cheaper(walk, index.size, tol) else "eigh"
    if method == "chebyshev":
        return graph_term_rows(walk, index, require_positive("tol", tol))
    full = _graph_term_by_eigh(walk)
    return full if sources is None else full[index]


def _chebyshev_is_cheaper(walk, rows: int, tol: float) -> bool:
    n = walk.shape[0]
    if rows == n and (n < SPARSE_SPECTRUM_FROM or not is_sparse_enough(walk)):
        return False  # small or dense: the spectrum for K would already cost an eigendecomposition
    nnz = walk.nnz if sp.issparse(walk) else np.count_nonzero(walk)
    terms = log_series(*spectrum_interval(walk), tol).coefficients.size
    return terms * (nnz + 4 * n) * rows * _EIGH_FLOP_ADVANTAGE < 4.0 * n**3


def _graph_term_by_eigh(walk) -> np.ndarray:
    """L by one `scipy.linalg.eigh` of I - W + 11^T/n (W already validated)."""
    shifted = walk.toarray() if sp.issparse(walk) else np.array(walk, dtype=np.float64)
    n = shifted.shape[0]
    # Build I - W + 11^T/n in place: its eigenvalues are 1 (on 1/sqrt(n)) and 1 - lambda_k,
    # all > 0 for an ergodic walk, so the top eigenpair needs no special handling.
    np.negative(shifted, out=shifted)
    shifted += 1.0 / n
    shifted[np.diag_indices(n)] += 1.0
    # MRRR ("evr") needs O(n) workspace where divide-and-conquer needs 2 n^2, and was faster.
    mu, phi = abandonable(sla.eigh, shifted, overwrite_a=True, driver="evr", check_finite=False)
    if mu.min() <= 0:
        raise TopologyError(
            f"I - W + 11^T/n is singular (eigenvalue {mu.min():.3g}); W is not ergodic"
        )
    return (phi * -np.log(mu)) @ phi.T


def _right_multiplier(walk):
    """Function rows -> rows @ W, sparse when W is sparse enough for it to pay."""
    if sp.issparse(walk) or np.count_nonzero(walk) < 0.1 * walk.size:
        transposed = sp.csr_array(walk).T.tocsr()
        return lambda rows: (transposed @ rows.T).T
    return lambda rows: rows @ walk


def random_walk_visit_sum(matrix, T: int, sources=None) -> np.ndarray:
    """Rows ``sources`` (default: all) of sum_{t=1..T} W^t / t, by T products with W
    (O(T k n d) for k sources on a degree-d graph). Any ergodic W is accepted."""
    walk = validate_walk(matrix)
    n = walk.shape[0]
    index = source_index(sources, n)
    rows = np.zeros((index.size, n))  # e_u for each source, without an n x n identity
    rows[np.arange(index.size), index] = 1.0
    step = _right_multiplier(walk)
    total = np.zeros_like(rows)
    for t in range(1, require_int("T", T, 1) + 1):
        rows = step(rows)
        total += rows / t
    return total


def random_walk_first_hit_sum(matrix, T: int, sources=None) -> np.ndarray:
    """Rows ``sources`` (default: all) of sum_{t=1..T} P[tau_uv = t] / t, tau_uv the first
    t >= 1 at which the walk started at u is at v: PN-f-DP's "RDP (HT)" weights, which only
    count the first visit of v (later views of the token are post-processing of that one plus
    noise independent of u). By the recursion P[tau = t]_uv = sum_{k != v} W_uk P[tau = t-1]_kv,
    i.e. T products of W with an n x n array whose diagonal is zeroed between steps:
    O(T n nnz), whatever rows are asked. Entrywise <= `random_walk_visit_sum`."""
    walk = validate_walk(matrix)
    n = walk.shape[0]
    index = source_index(sources, n)
    left = _left_multiplier(walk)
    hit = walk.toarray() if sp.issparse(walk) else walk.copy()  # P[tau = 1] = W
    total = hit.copy()
    for t in range(2, require_int("T", T, 1) + 1):
        np.fill_diagonal(hit, 0.0)  # walks that already hit v drop out
        hit = left(hit)
        total += hit / t
    return total[index]


def _left_multiplier(walk):
    """Function X -> W @ X, sparse when W is sparse enough for it to pay."""
    if sp.issparse(walk) or np.count_nonzero(walk) < 0.1 * walk.size:
        csr = sp.csr_array(walk)
        return lambda block: csr @ block
    return lambda block: walk @ block


def closed_form_tail_bound(matrix, T: int) -> float:
    """Bound on max_{u,v} |(R2 bracket) - (R1 sum)| = |sum_k sum_{t>T} lambda_k^t/t phi_k(u)
    phi_k(v)| <= g^(T+1) / ((T+1)(1-g)), g = max_{k>=2} |lambda_k| (Cauchy-Schwarz on the
    orthonormal eigenvectors). Multiply by N_u alpha Delta^2 / sigma^2 for eps."""
    g = 1.0 - spectral_gap(matrix, absolute=True)
    T = require_int("T", T, 1)
    return float(g ** (T + 1) / ((T + 1) * (1.0 - g)))


def random_walk_pndp(
    matrix,
    *,
    T: int,
    sigma: float,
    alpha: float,
    sensitivity: float = 1.0,
    contributions=None,
    method: str = "closed_form",
    sources=None,
    graph_term: str = "auto",
) -> np.ndarray:
    """PNDP matrix eps[u, v] = eps_{u->v}(alpha) of random-walk DP-SGD, (R2) or (R1).

    ``contributions`` is N_u (scalar, or one value per node); default T/n, which needs a
    doubly stochastic W. ``method="closed_form"`` (R2) needs W symmetric too, and computes its
    graph term by ``graph_term`` (see `random_walk_graph_term`);
    ``"finite_sum"`` (R1) takes any ergodic W when N_u is given; ``"hitting_time"`` is (R1)
    with (W^t)[u, v] replaced by the first-hitting probability P[tau_uv = t] (PN-f-DP's
    refinement, `random_walk_first_hit_sum`), never larger. ``sources`` selects the
    rows u returned. The diagonal u = v is 0: a node's view of its own data is not a
    leak. The result is linear in alpha: eps / alpha is a per-pair zCDP rho.
    """
    if method not in METHODS:
        raise TopologyError(f"unknown method '{method}' (known: {', '.join(METHODS)})")
    T, alpha = require_int("T", T, 1), require_order(alpha)
    sigma = require_positive("sigma", sigma)
    sensitivity = require_positive("sensitivity", sensitivity)
    scale = alpha * sensitivity**2 / sigma**2
    walk = validate_walk(
        matrix, doubly_stochastic=contributions is None, symmetric=method == "closed_form"
    )
    n = walk.shape[0]
    index = source_index(sources, n)
    if method == "closed_form":
        weights = random_walk_graph_term(walk, sources=sources, method=graph_term)
        weights += harmonic_number(T) / n  # in place: at n = 10^4 each copy is 800 MB
    elif method == "hitting_time":
        weights = random_walk_first_hit_sum(walk, T, index)
    else:
        weights = random_walk_visit_sum(walk, T, index)
    weights *= scale
    weights *= _visits(contributions, T, n)[index, None]
    weights[np.arange(index.size), index] = 0.0
    return weights


def source_index(sources, n: int) -> np.ndarray:
    """Row indices for ``sources`` (all nodes when None), checked to lie in 0..n-1."""
    index = np.arange(n) if sources is None else np.atleast_1d(np.asarray(sources, dtype=np.int64))
    if index.ndim != 1 or index.size == 0 or index.min() < 0 or index.max() >= n:
        raise TopologyError(f"sources must be node ids in 0..{n - 1} (got {sources!r})")
    return index


def _visits(contributions, T: int, n: int) -> np.ndarray:
    """N_u per node: T/n by default, else the given scalar or length-n values (>= 0)."""
    if contributions is None:
        return np.full(n, T / n)
    visits = np.asarray(contributions, dtype=np.float64)
    if visits.shape not in ((), (n,)) or not np.all(np.isfinite(visits)) or np.any(visits < 0):
        raise TopologyError(f"contributions must be one finite value >= 0, or n = {n} of them")
    return np.broadcast_to(visits, (n,))


def walk_length(matrix, sigma: float, factor: float = 20.0) -> int:
    """Number of walk steps T = int(factor * ceil(ln n / gap) * (1/4 + sigma^2) / sigma^2),
    gap = 1 - lambda_2: the rule of the authors' released code (factor 20; not stated in
    the paper as read here). It gives T = 275 on the hypercube of dimension 5, sigma = 1."""
    sigma = require_positive("sigma", sigma)
    n = matrix.shape[0]
    hops = np.ceil(np.log(n) / spectral_gap(matrix))
    return int(require_positive("factor", factor) * hops * (0.25 + sigma**2) / sigma**2)


def local_dp_loss(
    *, alpha: float, sigma: float, sensitivity: float = 1.0, releases: float = 1
) -> float:
    """Renyi loss when the observer sees every noisy release of u: releases * alpha
    Delta^2 / (2 sigma^2) (Gaussian mechanism, Mironov 2017 Table II, composed by Prop. 1).
    Every PNDP bound may be clipped at this value, since v's view is a post-processing
    of u's noisy releases."""
    alpha = require_order(alpha)
    return float(releases) * alpha * require_positive("sensitivity", sensitivity) ** 2 / (
        2.0 * require_positive("sigma", sigma) ** 2
    )


def clip_to_local(eps: np.ndarray, local_loss: float) -> np.ndarray:
    """Entrywise min(eps, local_loss): the PNDP bound never needs to exceed local DP."""
    return np.minimum(eps, local_loss)
