"""Confidence intervals of a paired mean, and the verdict they give.

The margins are one per seed (arm A's metric minus arm B's on the same seed, or a metric minus a
threshold), so the interval is of their mean: Student's t (the default: exact for normal margins,
sensible at 5 seeds), or a percentile bootstrap with a fixed generator (so that the docs regenerate
byte for byte). A verdict is ``reproduced`` where the interval lies above zero, ``not reproduced``
where it lies below, ``tie`` where it covers zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
TIE = "tie"
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
        return Interval(mean, float(low), float(high), n, "bootstrap")
    spread = float(values.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf((1 + level) / 2, df=n - 1)) * spread
    return Interval(mean, mean - half, mean + half, n, "t")
