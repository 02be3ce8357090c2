"""Rows of the random-walk graph term L = -ln(I - W + 11^T/n) without a dense eigendecomposition.

L = f(A) with A = W - 11^T/n and f(x) = -ln(1 - x): A has W's spectrum with the eigenvalue 1 (on
the constant vector) moved to 0, where f vanishes, so f(A) is the matrix logarithm of the closed
form (R2) in `topologies.accounting`. f is expanded in Chebyshev polynomials on an interval
[a, b] that holds A's spectrum (lambda_n and lambda_2 of W by Lanczos, and 0), and f(A) X is
summed by the three-term recurrence T_{k+1} = 2 B T_k - T_{k-1}, B the affine map of A onto
[-1, 1]: each term is one product of the sparse W with a block of X, O(nnz) per column.

Why this and not `scipy.linalg.eigh`: the eigendecomposition is O(n^3) time and four n x n
arrays whatever is asked; the expansion costs O(K nnz) per requested row, so k rows (sources)
never touch an n x n array, and the full matrix at n = 10^4 is K sparse-dense products. K
follows from the coefficients: f is analytic on a Bernstein ellipse around [a, b] that reaches
its pole at x = 1, so |c_k| decays like rho^-k with rho = y + sqrt(y^2 - 1), y = (2 - a - b) /
(b - a); K grows like ln(1/tol) / sqrt(gap). Error: on A's spectrum |T_k| <= 1, so the
operator-norm (hence entrywise) error of the truncated sum is at most the sum of the dropped
|c_k| (`TruncatedSeries.tail`), which the caller's ``tol`` bounds; rounding adds about K machine
epsilons. The products are scipy's (CSR times a dense block, 3.5 GFLOP/s at n = 10^4 on one
core, 2.5x torch's CSR kernel measured side by side), one block per thread.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.fft
import scipy.sparse as sp

from .errors import TopologyError

# Columns per block. Each product reads a row of the block per nonzero of W, so the block should
# stay in cache: at n = 10^4 a 32-column block is 2.5 MB. Measured here (scipy, one core, loaded
# machine), GFLOP/s of the product: 3.5 with 32 columns, 1.8 with 256, 1.7 with 1024.
BLOCK = 32


@dataclass(frozen=True)
class TruncatedSeries:
    """Chebyshev coefficients of -ln(1 - x) on [low, high], and the bound on what was dropped."""

    low: float
    high: float
    coefficients: np.ndarray
    tail: float


def log_series(low: float, high: float, tol: float) -> TruncatedSeries:
    """The shortest Chebyshev series of -ln(1 - x) on [low, high] (high < 1) whose dropped
    coefficients sum to at most ``tol`` (interpolation at N Chebyshev points by a DCT, N doubled
    until the last coefficients are far below ``tol``)."""
    if not -1.0 - 1e-9 <= low < high < 1.0:
        raise TopologyError(f"Chebyshev interval [{low}, {high}] must lie in [-1, 1) with low < high")
    points = 256
    while True:
        theta = np.pi * (np.arange(points) + 0.5) / points
        x = 0.5 * (high - low) * np.cos(theta) + 0.5 * (high + low)
        coefficients = scipy.fft.dct(-np.log1p(-x), type=2) / points
        coefficients[0] /= 2.0
        if np.abs(coefficients[-8:]).max() < 1e-3 * tol or points >= 1 << 20:
            break
        points *= 2
    tails = np.cumsum(np.abs(coefficients)[::-1])[::-1]  # tails[k] = sum_{j >= k} |c_j|
    keep = int(np.argmax(tails <= tol)) if np.any(tails <= tol) else points
    return TruncatedSeries(low, high, coefficients[:keep], float(tails[keep]) if keep < points else np.inf)


def spectrum_interval(walk) -> tuple[float, float]:
    """[a, b] holding the spectrum of W - 11^T/n: lambda_n and lambda_2 of W, and 0, with a
    margin for the eigensolver's tolerance."""
    from .spectral import _second_and_last

    second, last = _second_and_last(walk)
    margin = 1e-9 + 1e-7 * (second - last)
    low, high = min(last, 0.0) - margin, max(second, 0.0) + margin
    if high >= 1.0:
        raise TopologyError(f"lambda_2 = {second:.12g}: the walk does not mix, its graph term is infinite")
    return max(low, -1.0), high


def graph_term_rows(walk, sources: np.ndarray, tol: float, series: TruncatedSeries | None = None) -> np.ndarray:
    """Rows ``sources`` of L = -ln(I - W + 11^T/n) for a symmetric doubly stochastic ergodic W,
    each entry within ``tol`` of the exact value (plus rounding). L is symmetric, so row u is
    f(A) e_u. Blocks of `BLOCK` sources are independent: they run on one thread per core (scipy's
    sparse product releases the GIL), and each block's numbers do not depend on the threads.
    ``series``: `log_series` of W's interval, when a caller asking for rows block by block has it
    already (the spectrum is two Lanczos runs, seconds at n = 3 x 10^4)."""
    series = series if series is not None else log_series(*spectrum_interval(walk), tol)
    csr = sp.csr_array(walk, dtype=np.float64)
    starts = range(0, sources.size, BLOCK)
    out = np.empty((sources.size, csr.shape[0]))

    def rows(start: int) -> None:
        chunk = sources[start:start + BLOCK]
        block = np.zeros((csr.shape[0], chunk.size))
        block[chunk, np.arange(chunk.size)] = 1.0
        out[start:start + chunk.size] = _apply(csr, series, block).T

    pool = ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1))
    try:
        list(pool.map(rows, starts))
    finally:
        # Ctrl-C (or a failed block) while waiting: drop the blocks not started, or the pool would
        # compute all of them (minutes at n = 4096) before the interrupt could propagate.
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def _apply(matrix: sp.csr_array, series: TruncatedSeries, block: np.ndarray) -> np.ndarray:
    """sum_k c_k T_k(B) X for X = ``block``, B = (2 A - (a + b) I) / (b - a), A = W - 11^T/n."""
    scale = 2.0 / (series.high - series.low)
    shift = (series.high + series.low) / (series.high - series.low)
    n = block.shape[0]

    def step(x: np.ndarray) -> np.ndarray:  # B x, in place on the product
        y = matrix @ x
        y -= x.sum(axis=0, keepdims=True) / n
        y *= scale
        y -= shift * x
        return y

    c = series.coefficients
    previous, current = block, step(block)
    total = c[0] * previous
    if c.size > 1:
        total += c[1] * current
    for k in range(2, c.size):
        following = step(current)
        following *= 2.0
        following -= previous
        previous, current = current, following
        total += c[k] * current
    return total
