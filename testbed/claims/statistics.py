"""Confidence intervals of a paired mean, and the verdict they give.

The margins are one per seed (arm A's metric minus arm B's on the same seed, or a metric minus a
threshold), so the interval is of their mean: Student's t (the default: exact for normal margins,
sensible at 5 seeds), or a percentile bootstrap with a fixed generator (so that the docs regenerate
byte for byte). A verdict is ``reproduced`` where the interval lies above zero, ``not reproduced``
where it lies below, ``tie`` where it covers zero.

Across many rows some intervals exclude zero by chance, so the docs also adjust each row's two-sided
p-value (the paired t-test's, or the bootstrap's for a bootstrap row) with Benjamini-Hochberg
(`q_values`); and for a tie they state how many paired seeds a t-test would need to detect the
observed effect (`seeds_needed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
POWER = 0.8  # the conventional power at which seeds_needed sizes a rerun
MOST_SEEDS = 100_000  # beyond this many seeds, an effect is no effect at the scale of a CPU miniature

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
TIE = "tie"
REPRODUCED_BORDERLINE = "reproduced (borderline)"  # called, but its q-value is above the false discovery rate
NOT_REPRODUCED_BORDERLINE = "not reproduced (borderline)"
INCONCLUSIVE = "inconclusive"  # the precondition failed: the setting cannot test the claim
PENDING = "pending"  # too few paired seeds measured to call it


@dataclass(frozen=True)
class Interval:
    """The mean of the paired margins and its confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    method: str  # "t", "bootstrap" or "exact" (deterministic metrics, no spread)
    p: float = math.nan  # two-sided p-value of a zero mean margin (nan for an exact value)

    def verdict(self) -> str:
        if self.low > 0:
            return REPRODUCED
        if self.high < 0:
            return NOT_REPRODUCED
        return TIE


def paired_interval(margins: list[float], level: float, method: str, deterministic: bool = False) -> Interval | None:
    """The interval of the mean margin, or None where it cannot be had (fewer than 2 seeds, unless
    the metric is deterministic, where one seed is the exact value)."""
    values = np.asarray(margins, dtype=float)
    n = len(values)
    if n == 0 or (n == 1 and not deterministic):
        return None
    mean = float(values.mean())
    if deterministic:
        return Interval(mean, float(values.min()), float(values.max()), n, "exact")
    from scipy import stats

    if method == "bootstrap":
        found = stats.bootstrap((values,), np.mean, confidence_level=level, n_resamples=BOOTSTRAP_RESAMPLES,
                                method="percentile", rng=np.random.default_rng(0))
        low, high = found.confidence_interval
        # The percentile p-value: twice the smaller share of resampled means on either side of zero,
        # so that p < 1 - level exactly where the percentile interval excludes zero.
        means = found.bootstrap_distribution
        p = min(1.0, 2 * min(float((means <= 0).mean()), float((means >= 0).mean())))
        return Interval(mean, float(low), float(high), n, "bootstrap", p)
    spread = float(values.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf((1 + level) / 2, df=n - 1)) * spread
    if spread == 0:  # identical margins: the t statistic is infinite, or undefined at zero
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean) / spread, df=n - 1))
    return Interval(mean, mean - half, mean + half, n, "t", p)


def q_values(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values: a row whose q is at most the false discovery rate F
    is a discovery of the procedure at rate F, over all the rows given."""
    if not p_values:
        return []
    from scipy import stats

    return [float(q) for q in stats.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")]


def t_test_power(effect: float, n: int, level: float) -> float:
    """Power of the two-sided paired t-test at ``level`` with ``n`` pairs, where the true mean
    margin is ``effect`` standard deviations of a margin: P(|T| > t_crit), T noncentral t with
    n - 1 degrees of freedom and noncentrality effect * sqrt(n)."""
    from scipy import stats

    critical = float(stats.t.ppf((1 + level) / 2, df=n - 1))
    shift = abs(effect) * math.sqrt(n)
    return float(stats.nct.sf(critical, n - 1, shift) + stats.nct.cdf(-critical, n - 1, shift))


def seeds_needed(margins: list[float], level: float, power: float = POWER, most: int = MOST_SEEDS) -> int | None:
    """The fewest paired seeds at which the t-test at ``level`` has ``power`` to find the observed
    effect (mean margin over its standard deviation, both from ``margins``), or None where the margins
    show no effect (a zero mean) or need more than ``most`` seeds."""
    values = np.asarray(margins, dtype=float)
    if len(values) < 2 or values.mean() == 0:
        return None
    spread = float(values.std(ddof=1))
    if spread == 0:
        return 2
    effect = float(values.mean()) / spread
    # Power grows with n: double n until it reaches the power, then bisect below. (Doubling keeps the
    # noncentrality near the critical value, where scipy's noncentral t is accurate.)
    high = 2
    while t_test_power(effect, high, level) < power:
        if high >= most:
            return None
        high = min(2 * high, most)
    low = max(2, high // 2)
    while low < high:
        middle = (low + high) // 2
        if t_test_power(effect, middle, level) >= power:
            high = middle
        else:
            low = middle + 1
    return low
