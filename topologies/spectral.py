"""Spectral quantities of a reversible walk: stationary law, spectral gap, mixing time.

A walk W reversible for its stationary law pi (pi_u W[u,v] = pi_v W[v,u]; true for
Metropolis-Hastings and for the simple random walk) is similar to the symmetric matrix
S = diag(pi)^1/2 W diag(pi)^-1/2, so its eigenvalues are real and come from
`scipy.linalg.eigvalsh`. Conventions (Levin, Peres, Wilmer, "Markov Chains and Mixing
Times", 2nd ed., Ch. 12): 1 = lambda_1 > lambda_2 >= ... >= lambda_n > -1;
spectral gap = 1 - lambda_2; absolute spectral gap = 1 - max(lambda_2, |lambda_n|);
relaxation time = 1 / absolute gap.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .abandonable import abandonable
from .errors import TopologyError
from .walks import ATOL, validate_walk


def _dense(matrix) -> np.ndarray:
    """Dense float64 version of a validated matrix (no copy when already dense)."""
    return matrix.toarray() if sp.issparse(matrix) else matrix


def stationary_distribution(matrix) -> np.ndarray:
    """Stationary law pi of an ergodic walk: the solution of pi W = pi, sum(pi) = 1."""
    walk = _dense(validate_walk(matrix))
    n = walk.shape[0]
    if np.allclose(walk.sum(axis=0), 1.0, rtol=0.0, atol=ATOL):
        return np.full(n, 1.0 / n)  # doubly stochastic: uniform, no O(n^3) solve needed
    system = walk.T - np.eye(n)
    system[-1, :] = 1.0  # replace one (redundant) balance equation by the normalisation
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    return abandonable(np.linalg.solve, system, b=rhs)


def eigenvalues(matrix) -> np.ndarray:
    """Eigenvalues of a reversible ergodic walk, in decreasing order.

    Raises `TopologyError` if the walk is not reversible (no real spectrum guaranteed).
    """
    walk = _dense(validate_walk(matrix))
    if np.abs(walk - walk.T).max() <= ATOL:
        return abandonable(sla.eigvalsh, walk, check_finite=False)[::-1]
    pi = stationary_distribution(walk)
    flow = pi[:, None] * walk
    if np.abs(flow - flow.T).max() > ATOL * max(1.0, flow.max()):
        raise TopologyError("walk is not reversible; its spectral gap is not defined here")
    root = np.sqrt(pi)
    symmetric = root[:, None] * walk / root[None, :]
    return abandonable(sla.eigvalsh, (symmetric + symmetric.T) / 2)[::-1]


def spectral_gap(matrix, *, absolute: bool = False) -> float:
    """1 - lambda_2 (or, with ``absolute``, 1 - max(lambda_2, |lambda_n|)).

    The plain gap is the quantity called "spectral gap" by Cyffers, Bellet, Upadhyay
    (ICML 2024) and PN-f-DP (NeurIPS 2025); the absolute gap drives mixing.
    """
    second, last = _second_and_last(matrix)
    return float(1.0 - (max(second, abs(last)) if absolute else second))


# Above this size a sparse symmetric walk gets lambda_2 and lambda_n by Lanczos (two extreme
# eigenvalues, O(nnz) per iteration) instead of the full O(n^3) dense spectrum: at n = 10^4 the
# dense path costs minutes and gigabytes for two numbers. A dense array counts as sparse when at
# most `SPARSE_SHARE` of its entries are nonzero (a graph of average degree below n/10; a
# 4096-node hypercube's walk has 0.3%): it is converted, which costs one pass over it.
SPARSE_SPECTRUM_FROM = 2_000
SPARSE_SHARE = 0.1


def is_sparse_enough(matrix) -> bool:
    """Whether ``matrix`` is a scipy sparse array, or a dense one with few enough nonzeros to be one."""
    return bool(sp.issparse(matrix) or np.count_nonzero(matrix) <= SPARSE_SHARE * np.size(matrix))


def _second_and_last(matrix) -> tuple[float, float]:
    """lambda_2 and lambda_n of a reversible ergodic walk."""
    if np.shape(matrix)[0] >= SPARSE_SPECTRUM_FROM and is_sparse_enough(matrix):
        walk = sp.csr_array(validate_walk(matrix))
        if abs(walk - walk.T).max() <= ATOL:
            # A fixed start: ARPACK's own random one advances from call to call, so the last digits
            # (and a walk length rounded up from them) would depend on what the process did before.
            start = np.random.default_rng(0).random(walk.shape[0])
            top = spla.eigsh(walk, k=2, which="LA", tol=1e-12, v0=start, return_eigenvectors=False)
            bottom = spla.eigsh(walk, k=1, which="SA", tol=1e-12, v0=start, return_eigenvectors=False)
            return float(np.sort(top)[0]), float(bottom[0])
    values = eigenvalues(matrix)
    return float(values[1]), float(values[-1])


def relaxation_time(matrix) -> float:
    """t_rel = 1 / absolute spectral gap (LPW Sec. 12.2)."""
    return 1.0 / spectral_gap(matrix, absolute=True)


def mixing_time(matrix, eps: float = 0.25, *, exact: bool = False, max_steps: int = 100_000) -> int:
    """Mixing time t_mix(eps) = min{t : max_u TV(W^t(u, .), pi) <= eps}.

    By default the upper bound of LPW Thm 12.4 (Thm 12.3 in the 1st ed.) for reversible
    walks, t_mix(eps) <= ceil(t_rel * ln(1 / (eps * pi_min))). With ``exact=True`` the
    distance is computed by powering W (O(n^2 d) per step: small graphs only).
    """
    if not 0 < eps < 1:
        raise TopologyError(f"mixing-time eps must be in (0, 1) (got {eps})")
    if exact:
        return _exact_mixing_time(matrix, eps, max_steps)
    pi_min = float(stationary_distribution(matrix).min())
    return int(math.ceil(relaxation_time(matrix) * math.log(1.0 / (eps * pi_min))))


def _exact_mixing_time(matrix, eps: float, max_steps: int) -> int:
    """First t with max_u TV(W^t(u,.), pi) <= eps; TV distance is non-increasing in t."""
    walk = validate_walk(matrix)
    pi = stationary_distribution(walk)
    step = sp.csr_array(walk)
    power = np.eye(walk.shape[0])
    for t in range(1, max_steps + 1):
        power = (step.T @ power.T).T  # power <- power @ W, with W sparse
        if 0.5 * np.abs(power - pi[None, :]).sum(axis=1).max() <= eps:
            return t
    raise TopologyError(f"walk did not mix to TV <= {eps} within {max_steps} steps")
