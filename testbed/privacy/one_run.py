"""The one-run privacy audit's statistics (Steinke, Nasr, Jagielski, "Privacy Auditing with One (1)
Training Run", NeurIPS 2023), shared by the decentralized and the federated audits.

A run holds m canaries, each included independently with probability 1/2; an attacker scores them
and guesses "included" for its r best-scored. Theorem 3.1 (and its delta > 0 form): if every canary
is protected by (epsilon, delta)-DP, then with v correct guesses among r,
P[V >= v] <= beta + alpha delta 2m, beta = P[Binomial(r, e^eps/(1+e^eps)) >= v] and
alpha = max_{i=1..v} (P[Bin >= v - i] - beta)/i (as restated in the project notes on jax_privacy's
`_one_run_p_value`). The largest epsilon this rejects at level ``significance`` is the empirical
lower bound; several r are tried with a Bonferroni correction, so the bound holds with probability
>= 1 - significance.

Power: even a perfect attacker certifies at most `audit_power`, which m canaries cap (with half of
them in: about 2.9 for m = 200, 4.5 for m = 1000, at delta 1e-5 and significance 0.05); an
accountant's epsilon above it cannot be tested (`verdict` says "too weak", `canaries_needed` how
many canaries could test it).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
MAX_EPSILON = 60.0  # beyond any bound r <= 10^6 guesses can certify
MAX_CANARIES = 1 << 20  # `canaries_needed` looks no further

Verdict = Literal["violation", "consistent", "too weak"]


def one_run_p_value(epsilon: float, canaries: int, guesses: int, correct: int, delta: float = 0.0) -> float:
    """Upper bound on P[>= correct right guesses out of ``guesses``] under (epsilon, delta)-DP."""
    # Imported here, as brentq below: about 0.4 s of imports, and the accountants and a federated
    # client (through its DP mods) import this module where no audit is computed.
    from scipy.special import expit
    from scipy.stats import binom

    q = expit(epsilon)
    beta = binom.sf(correct - 1, guesses, q)
    if delta == 0 or correct == 0:
        return float(beta)
    shifts = np.arange(1, correct + 1)
    alpha = np.max((binom.sf(correct - shifts - 1, guesses, q) - beta) / shifts)
    return float(beta + alpha * delta * 2 * canaries)


def epsilon_from_guesses(canaries: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """Largest epsilon rejected at level ``significance`` by ``correct`` right guesses of ``guesses``."""
    excess = lambda eps: one_run_p_value(eps, canaries, guesses, correct, delta) - significance
    if guesses == 0 or excess(0.0) > 0:
        return 0.0
    if excess(MAX_EPSILON) <= 0:
        return MAX_EPSILON
    from scipy.optimize import brentq

    return float(brentq(excess, 0.0, MAX_EPSILON, xtol=1e-10))


def guess_counts(canaries: int) -> list[int]:
    """The numbers r of top-scored canaries guessed "included": `GUESS_FRACTIONS` of m."""
    return sorted({max(1, int(round(f * canaries))) for f in GUESS_FRACTIONS})


def epsilon_lower_bound(scores: np.ndarray, included: np.ndarray, delta: float, significance: float) -> float:
    """Empirical epsilon lower bound from canary scores (higher = more likely included): the best
    over guessing the top r for r in `guess_counts`, each tested at significance / #r."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included).astype(bool)
    m = scores.size
    order = np.argsort(-scores, kind="stable")
    counts = guess_counts(m)
    level = significance / len(counts)
    hits = np.cumsum(included[order])
    return max(epsilon_from_guesses(m, r, int(hits[r - 1]), delta, level) for r in counts)


def audit_power(canaries: int, delta: float, significance: float, included: int | None = None) -> float:
    """The largest lower bound `epsilon_lower_bound` can report with m = ``canaries``: a perfect
    attacker, right on every guess it can be right on, at the same guess counts and Bonferroni level.

    With ``included`` (how many canaries were drawn in) r guesses hold at most min(r, included)
    right ones; without it every guess counts as right, which bounds every draw of the inclusions.
    An accountant's epsilon above this cannot be tested by the audit, whatever the attacker does.
    """
    if canaries <= 0:
        return 0.0
    counts = guess_counts(canaries)
    level = significance / len(counts)
    most = canaries if included is None else int(included)
    return max(epsilon_from_guesses(canaries, r, min(r, most), delta, level) for r in counts)


def canaries_needed(epsilon: float, delta: float, significance: float) -> int | None:
    """About the fewest canaries whose audit has power above ``epsilon`` (`audit_power` with half of
    them included, the draw's expectation); None when no number can: the delta term 2 m delta of
    the bound grows with m, so the power peaks (near m ~ 1 / (20 delta)) and then falls.

    The search doubles m until the power passes ``epsilon`` (or stops rising), then bisects between
    the last two: the power is not exactly monotone in m (the guess counts are rounded fractions
    of m), so the answer is the m the bisection meets, within a few of the smallest."""
    power = lambda m: audit_power(m, delta, significance, included=m // 2)
    low, high, best = 1, 2, 0.0
    while (reached := power(high)) <= epsilon:
        if high >= MAX_CANARIES or reached < best:
            return None  # past the peak without reaching epsilon
        low, high, best = high, high * 2, reached
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if power(middle) <= epsilon else (low, middle)
    return high


def power_peak(delta: float, significance: float) -> tuple[float, int]:
    """The most power half-included canaries reach at ``delta`` (the power rises with m, then falls as
    the 2 m delta term grows), and the count that reaches it: powers of two searched, up to
    `MAX_CANARIES`, until the power falls."""
    best, count, m = 0.0, 0, 2
    while m <= MAX_CANARIES:
        reached = audit_power(m, delta, significance, included=m // 2)
        if reached < best:
            break
        best, count, m = reached, m, 2 * m
    return best, count


def verdict(lower_bound: float, power: float, accountant_epsilon: float) -> Verdict:
    """What the audit says of an accountant's epsilon: "violation" when the empirical lower bound
    exceeds it (the mechanism leaks more than accounted, at the audit's confidence); "too weak" when
    not even a perfect attacker could show it (power below it); else "consistent"."""
    if lower_bound > accountant_epsilon:
        return "violation"
    return "too weak" if power < accountant_epsilon else "consistent"
