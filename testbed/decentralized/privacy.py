"""Pairwise network-DP accounting of a training run, the privacy target, and sigma calibration.

Every bound here is linear in the Renyi order (eps(alpha) = alpha rho) and proportional to
Delta^2 / sigma^2, so each algorithm's accountant returns the "unit" rho (sigma = 1, Delta in units
of the clipping norm C) of every pair after every step, and sigma only rescales it. Conversions to
(epsilon, delta) use `topologies.linear_rdp_to_dp`. Step t counts:

* random walk: rho_{u->v}(t) = N(t) Delta^2 sum_{s=1..t} (W^s)[u,v] / s, N(t) = min(cap, t): the
  finite sum (R1) of `topologies.accounting` with horizon t and u's contributions bounded by the
  cap; orders limited to `topologies.max_valid_order`. Clipped at the local-DP loss
  N(t) Delta^2 / 2 (v sees at most all of u's noisy releases), valid at every order. With
  ``random_walk.accounting: hitting_time``, (W^s)[u,v] becomes P[tau_uv = s] (first visits only).
* gossip, k iterations of (noisy local step, R rounds): a contribution of iteration i reaches v in
  iteration i + j through the messages P_t Q^j Y (Q = P_R, one whole averaging), and each message of
  each neighbour w of v is a Gaussian mechanism on it (the Muffliato bound (M1) of
  `topologies.gossip`, first power 0). Summing over (contribution, message) pairs,
      rho_{u->v}(k) = Delta^2/2 sum_{j=0..k-1} (k - j) S_j[u, v],
      S_j[u, v] = sum_{t<R} sum_{w in N(v)} (P_t Q^j)[w,u]^2 / ||e_w^T P_t Q^j||^2,
  the (k - j)-weighted form of the corrected Muffliato-GD bound of MFDL (Bellet et al., ICLR 2026)
  for one round per iteration (R = 1, P_1 = W); the project notes transcribe MFDL's numerator as
  (W^s)_uw without the square that (M1) gives each message here (MFDL's code was not checked).
  Splitting a message into one mechanism per contribution it carries can only increase the bound
  ((sum a_i)^2 / sum b_i <= sum a_i^2 / b_i, Cauchy-Schwarz). Clipped at k Delta^2 / 2.
* local DP: every release is public, rho(k) = k Delta^2 / 2 for every pair; the walk accounted
  this way (``random_walk.accounting: local``, the Fig. 2 baseline of Cyffers et al.) has
  rho(t) = min(cap, t) Delta^2 / 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq

from testbed.decentralized.audit import message_polynomials, senders
from testbed.decentralized.matrix_stream import Conversion, convert
from testbed.topologies import linear_rdp_to_dp, max_valid_order
from testbed.topologies.symmetry import Difference, full_matrix

# What one algorithm's accountant may cost. It runs before anything trains, in `testbed validate`
# and again at the start of the run, so it must fit in this machine's memory and in the minute a
# validate may take; the estimate is made before anything is allocated (1e9 walk steps asked for
# 7.45 GiB at once). The per-step time and the rate of the products were measured on this
# project's CI machine (2 busy cores): about 50 us a walk step at n = 8, 0.6 ms a gossip iteration
# of 3 rounds, 0.6 ms a walk step at n = 128, and some 20 us a step for the epsilon curve of a
# calibrated sigma; the estimate stays within a factor 2 of the time measured.
MAX_ACCOUNTANT_BYTES = 1 << 30
MAX_ACCOUNTANT_SECONDS = 30.0
CURVE_SECONDS = 20e-6  # a step of the epsilon curve (calibrating sigma converts it some 40 times)
STEP_SECONDS = 50e-6  # a step's numpy calls (a gossip iteration pays them three times a round)
FLOP_SECONDS = 2e-9  # a floating-point operation of a step's matrix products
STEP_BYTES = 160  # the per-step arrays: the maximum, its pair, the local ceiling, the epsilon curves


def accountant_cost(algorithm: str, accounting: str, n: int, edges: int, steps: int, rounds: int,
                    translated: bool) -> tuple[float, float]:
    """(bytes, seconds): what the accountant of ``algorithm`` would take over ``steps`` steps on a
    graph of ``n`` nodes and ``edges`` edges (``translated``: the walk's symmetry shortcut applies,
    `walk_unit_rho`), estimated from its loops without running them."""
    public = algorithm == "local_dp" or (algorithm == "random_walk" and accounting == "local")
    if public:
        flops, matrices, calls = 0, 0, 0
    elif algorithm == "random_walk" and accounting == "network" and translated:
        flops, matrices, calls = 4 * (n + edges), 2, 1  # a row, not a matrix, a step
    elif algorithm == "random_walk":  # a sparse product with an n x n array, then its running sum
        flops, matrices, calls = 2 * n * edges + 4 * n * n, 3, 1
    else:  # gossip: each round a sparse product and the messages' shares, then the received sums
        flops, matrices, calls = (rounds + 1) * (2 * n * edges + 6 * n * n), 6, 3 * (rounds + 1)
    size = steps * STEP_BYTES + matrices * n * n * 8
    return float(size), steps * (CURVE_SECONDS + calls * STEP_SECONDS + flops * FLOP_SECONDS)


def accountant_cost_error(algorithm: str, accounting: str, n: int, edges: int, steps: int, rounds: int,
                          translated: bool) -> str | None:
    """Why the accountant of `accountant_cost` cannot run here (None if it can)."""
    size, seconds = accountant_cost(algorithm, accounting, n, edges, steps, rounds, translated)
    what = f"{steps} steps of the {algorithm} accountant on {n} nodes"
    if size > MAX_ACCOUNTANT_BYTES:
        return (f"{what} would need about {size / 2**30:.3g} GiB of memory; at most "
                f"{MAX_ACCOUNTANT_BYTES / 2**30:g} GiB are allowed, so use fewer steps")
    if seconds > MAX_ACCOUNTANT_SECONDS:
        return (f"{what} would take about {seconds:.3g} s before training starts (and again in validate); "
                f"at most {MAX_ACCOUNTANT_SECONDS:g} s are allowed, so use fewer steps or a smaller graph")
    return None


@dataclass
class UnitRho:
    """rho at sigma = 1 after each step t = 0..steps: the largest over pairs u != v with its pair,
    the local-DP ceiling, and (when asked) the whole matrix at one step."""

    maximum: np.ndarray
    pair: np.ndarray  # [steps + 1, 2]: (u, v) of the maximum
    local: np.ndarray
    matrix: np.ndarray | None = None
    order_limited: bool = False  # random walk: orders <= max_valid_order(sigma)


def _off_diagonal_max(matrix: np.ndarray, transposed: bool = False) -> tuple[float, tuple[int, int]]:
    """The largest entry off the diagonal of ``matrix`` (or of ``matrix.T`` when ``transposed``) and
    its (row, column), the first in row-major order among equal ones; ``matrix`` is left as it was.

    In place (the diagonal is set aside and put back) rather than on a copy: at n = 2048 the walk
    calls this at each of 20000 steps, and a copy per call was most of the accountant's time.
    """
    diagonal = matrix.diagonal().copy()
    np.fill_diagonal(matrix, -np.inf)
    if transposed:  # row-major order of matrix.T: its rows are our columns; first column, then row
        rows = np.argmax(matrix, axis=0)
        column_max = matrix[rows, np.arange(matrix.shape[1])]
        column = int(np.argmax(column_max))
        value, where = float(column_max[column]), (column, int(rows[column]))
    else:
        flat = int(np.argmax(matrix))
        value, where = float(matrix.flat[flat]), divmod(flat, matrix.shape[1])
    np.fill_diagonal(matrix, diagonal)
    return value, where


def _collect(steps: int, matrices, local: np.ndarray, keep: int | None, order_limited: bool) -> UnitRho:
    """Run the per-step generator of (scale, matrix, transposed) and keep the per-step maximum of
    scale * matrix (scale >= 0; transposed: the matrix is stored as [v, u]) and one matrix."""
    maximum, pair, kept = np.zeros(steps + 1), np.zeros((steps + 1, 2), dtype=np.int64), None
    for t, (scale, matrix, transposed) in enumerate(matrices, start=1):
        value, where = _off_diagonal_max(matrix, transposed)
        maximum[t], pair[t] = scale * value, where
        if t == keep:
            kept = scale * (matrix.T if transposed else matrix)
        if keep is not None and t >= keep:
            break
    return UnitRho(maximum, pair, local, kept, order_limited)


def walk_unit_rho(walk: np.ndarray, steps: int, cap: int, sensitivity: float, keep: int | None = None,
                  difference: Difference | None = None) -> UnitRho:
    """Random-walk unit rho (module docstring) for t = 0..steps.

    With ``difference`` (the walk is translation-invariant, `topologies.symmetry.row_symmetry`)
    only node 0's row is followed: rho[u, v] = rho[0, v - u], the same numbers to rounding.
    """
    if difference is not None:
        return _translated_walk_unit_rho(walk, steps, cap, sensitivity, keep, difference)
    n = walk.shape[0]
    transposed = sp.csr_array(walk).T.tocsr()
    contributions = np.minimum(cap, np.arange(steps + 1))

    def powers():
        # (W^t)^T, kept transposed so that each step is one sparse-times-dense product on a
        # C-ordered array, with no transposed copies.
        power = np.eye(n)
        for _ in range(steps):
            power = transposed @ power
            yield power

    local = contributions * sensitivity**2 / 2.0
    return _collect(steps, _visit_sums(powers(), contributions * sensitivity**2, True), local, keep,
                    order_limited=True)


def walk_first_hit_unit_rho(walk: np.ndarray, steps: int, cap: int, sensitivity: float,
                            keep: int | None = None) -> UnitRho:
    """Random-walk unit rho with (W^s)[u, v] replaced by the first-hitting probability P[tau_uv = s]
    (``random_walk.accounting: hitting_time``, PN-f-DP's "RDP (HT)" refinement,
    `topologies.random_walk_first_hit_sum`): a node's later views of the token are post-processing
    of its first one plus noise independent of u. Never above `walk_unit_rho`; one sparse product
    with an n x n array a step, with no symmetry shortcut."""
    forward = sp.csr_array(walk)
    contributions = np.minimum(cap, np.arange(steps + 1))

    def first_hits():
        # P[tau = s] by P[tau = s]_uv = sum_{k != v} W_uk P[tau = s - 1]_kv, P[tau = 1] = W.
        hit = forward.toarray()
        for t in range(steps):
            if t:
                np.fill_diagonal(hit, 0.0)  # walks that have already hit v drop out
                hit = forward @ hit
            yield hit

    local = contributions * sensitivity**2 / 2.0
    return _collect(steps, _visit_sums(first_hits(), contributions * sensitivity**2, False), local, keep,
                    order_limited=True)


def _visit_sums(per_step, scales: np.ndarray, transposed: bool):
    """For the per-step matrices M_1, M_2, ... (as ``per_step`` yields them), the running sums
    sum_{s<=t} M_s / s with their scale, in the form `_collect` takes: one in-place sum a step."""
    total = term = None
    for t, matrix in enumerate(per_step, start=1):
        if total is None:
            total, term = np.zeros_like(matrix), np.empty_like(matrix)
        np.multiply(matrix, 1.0 / t, out=term)
        total += term
        yield scales[t], total, transposed


def _translated_walk_unit_rho(walk: np.ndarray, steps: int, cap: int, sensitivity: float, keep: int | None,
                              difference: Difference) -> UnitRho:
    """`walk_unit_rho` from the row of node 0: O(edges) a step instead of O(n * edges).

    By the symmetry every row is a permutation of row 0, so the largest off-diagonal entry of the
    matrix is the largest of row 0 off node 0, and its pair (0, v) is the first in row-major order.
    """
    n = walk.shape[0]
    transposed = sp.csr_array(walk).T.tocsr()
    contributions = np.minimum(cap, np.arange(steps + 1))
    maximum, pair, kept = np.zeros(steps + 1), np.zeros((steps + 1, 2), dtype=np.int64), None
    row, total = np.zeros(n), np.zeros(n)
    row[0] = 1.0
    for t in range(1, steps + 1):
        row = transposed @ row  # e_0^T W^t, as a column
        total += row / t
        scale = contributions[t] * sensitivity**2
        v = 1 + int(np.argmax(total[1:]))
        maximum[t], pair[t] = scale * total[v], (0, v)
        if t == keep:
            kept = scale * full_matrix(total, difference)
            break
    local = contributions * sensitivity**2 / 2.0
    return UnitRho(maximum, pair, local, kept, order_limited=True)


def gossip_unit_rho(walk: np.ndarray, steps: int, rounds: int, gamma: float, sensitivity: float,
                    keep: int | None = None) -> UnitRho:
    """Gossip (Muffliato-GD) unit rho (module docstring) for k = 0..steps iterations."""
    receive = sp.csr_array(senders(walk))

    def matrices():
        total, weighted = np.zeros(walk.shape), np.zeros(walk.shape)
        for j, s_j in enumerate(_lag_matrices(walk, steps, rounds, gamma, receive)):
            total += s_j
            weighted += j * s_j
            k = j + 1
            yield 1.0, sensitivity**2 / 2.0 * (k * total - weighted), False

    local = np.arange(steps + 1) * sensitivity**2 / 2.0
    return _collect(steps, matrices(), local, keep, order_limited=False)


def _lag_matrices(walk: np.ndarray, steps: int, rounds: int, gamma: float, receive: sp.csr_array):
    """S_j for j = 0..steps-1 (module docstring), each [u, v]."""
    averaging = np.eye(walk.shape[0])
    for _ in range(steps):
        share = np.zeros_like(averaging)
        for t, message in enumerate(message_polynomials(walk, rounds + 1, gamma, start=averaging)):
            if t < rounds:
                share += message**2 / np.einsum("ij,ij->i", message, message)[:, None]
        yield np.asarray(receive @ share).T
        averaging = message  # Q^{j+1} = P_R Q^j


def walk_local_unit_rho(n: int, steps: int, cap: int, sensitivity: float, keep: int | None = None) -> UnitRho:
    """The random walk accounted as local DP: each of a node's min(cap, t) releases is public, so every
    pair is at the ceiling min(cap, t) Delta^2 / 2 (the bound holds whoever starts the walk)."""
    return _public_releases(n, np.minimum(cap, np.arange(steps + 1)), sensitivity, keep)


def local_dp_unit_rho(n: int, steps: int, sensitivity: float, keep: int | None = None) -> UnitRho:
    """Local DP: every pair at k Delta^2 / 2 after k iterations."""
    return _public_releases(n, np.arange(steps + 1), sensitivity, keep)


def _public_releases(n: int, releases: np.ndarray, sensitivity: float, keep: int | None) -> UnitRho:
    """Every pair at releases[t] Delta^2 / 2: each release seen by everyone, composed."""
    local = releases * sensitivity**2 / 2.0
    pair = np.tile(np.array([0, 1]), (len(releases), 1))
    matrix = None
    if keep is not None:
        matrix = np.full((n, n), local[keep])
        np.fill_diagonal(matrix, 0.0)
    return UnitRho(local.copy(), pair, local, matrix, order_limited=False)


def to_epsilon(unit: np.ndarray, local: np.ndarray, sigma: float, delta: float, conversion: str,
               order_limited: bool, sensitivity: float) -> np.ndarray:
    """(epsilon, delta) of unit rho values at noise ``sigma``, clipped at the local-DP ceiling. A
    pairwise matrix is converted on every core, and only once per pair where it is symmetric (checked
    entry by entry: `matrix_stream.convert`); the numbers are those of one `linear_rdp_to_dp` call."""
    max_order = max_valid_order(sigma, sensitivity) if order_limited else None
    network = convert(np.asarray(unit) / sigma**2, Conversion(delta, conversion, max_order))
    ceiling, _ = linear_rdp_to_dp(np.asarray(local) / sigma**2, delta, method=conversion)
    return np.minimum(network, ceiling)


@dataclass
class PrivacyPlan:
    """What the accountant decided for one algorithm: sigma, how far the run may go, and why."""

    algorithm: str
    sigma: float
    calibrated: bool
    planned: int
    stop: int
    epsilon: np.ndarray  # largest pairwise epsilon after t = 0..planned steps
    target: float | None
    exceeded: dict = field(default_factory=dict)  # step, pair (u, v) and epsilon that would exceed

    def summary(self) -> dict:
        return {"sigma": self.sigma, "sigma_calibrated": self.calibrated, "planned_steps": self.planned,
                "stop_step": self.stop, "stopped_by_target": bool(self.exceeded),
                "epsilon_at_stop": float(self.epsilon[self.stop]),
                **{f"exceeded_{k}": v for k, v in self.exceeded.items()}}


def calibrate_sigma(epsilon_of_sigma, target: float) -> float:
    """The sigma whose final epsilon equals ``target`` (epsilon decreases in sigma)."""
    gap = lambda log_sigma: epsilon_of_sigma(np.exp(log_sigma)) - target
    low, high = np.log(1e-3), np.log(1e4)
    if gap(high) > 0:
        raise ValueError(f"privacy.target_epsilon: {target} is out of reach even with sigma = 1e4")
    if gap(low) <= 0:
        return float(np.exp(low))
    # Round up a hair so the final epsilon is at or below the target, not a float above it.
    return float(np.exp(brentq(gap, low, high, xtol=1e-12)) * (1 + 1e-9))


def make_plan(algorithm: str, unit: UnitRho, planned: int, sigma: float | None, target: float | None,
              delta: float, conversion: str, sensitivity: float) -> PrivacyPlan:
    """Calibrate sigma (when not given) so ``planned`` steps end at the target, then find the last
    step whose largest pairwise epsilon stays within the target."""
    curve = lambda s: to_epsilon(unit.maximum, unit.local, s, delta, conversion, unit.order_limited, sensitivity)
    calibrated = sigma is None
    if sigma is None:
        assert target is not None  # the config asks for sigma or a target epsilon
        sigma = calibrate_sigma(lambda s: float(curve(s)[planned]), target)
    epsilon = curve(sigma)
    stop, exceeded = planned, {}
    if target is not None and epsilon[planned] > target:
        stop = int(np.searchsorted(epsilon, target, side="right")) - 1  # epsilon is non-decreasing
        u, v = (int(x) for x in unit.pair[stop + 1])
        exceeded = {"step": stop + 1, "u": u, "v": v, "epsilon": float(epsilon[stop + 1])}
    return PrivacyPlan(algorithm, float(sigma), calibrated, planned, stop, epsilon, target, exceeded)
