"""The paper's analysis across a population of models: OOD robustness as a linear function of ID robustness.

OODRobustBench (Li et al. 2024, Sec. 4) fits ``ood = slope * id + intercept`` by least squares over
the model zoo, per shift, reports the fit's R^2 and slope, and defines a model's *effective
robustness* as its OOD robustness minus the trend's prediction from its ID robustness (the
residual: positive means more robust out of distribution than its ID robustness predicts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinearFit:
    """Least-squares line through (x, y) points and its coefficient of determination."""

    slope: float
    intercept: float
    r2: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.slope * np.asarray(x, dtype=np.float64) + self.intercept


def fit_line(x: np.ndarray, y: np.ndarray) -> LinearFit:
    """Ordinary least squares y ~ slope * x + intercept; R^2 = 1 - SS_res / SS_tot.

    With no spread in x the slope is undefined: the fit is then the mean of y and R^2 = 0. With no
    spread in y (every point on a horizontal line) the fit is exact and R^2 = 1.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(x) != len(y):
        raise ValueError(f"need at least two (x, y) pairs of equal length, got {len(x)} and {len(y)}")
    centred_x, centred_y = x - x.mean(), y - y.mean()
    spread_x, spread_y = float(centred_x @ centred_x), float(centred_y @ centred_y)
    if spread_x == 0.0:
        return LinearFit(0.0, float(y.mean()), 0.0)
    slope = float(centred_x @ centred_y) / spread_x
    intercept = float(y.mean() - slope * x.mean())
    residual = y - (slope * x + intercept)
    r2 = 1.0 if spread_y == 0.0 else 1.0 - float(residual @ residual) / spread_y
    return LinearFit(slope, intercept, r2)


def effective_robustness(id_robust: np.ndarray, ood_robust: np.ndarray, trend: LinearFit) -> np.ndarray:
    """Each model's OOD robustness above (+) or below (-) the population's trend line."""
    return np.asarray(ood_robust, dtype=np.float64) - trend.predict(id_robust)
