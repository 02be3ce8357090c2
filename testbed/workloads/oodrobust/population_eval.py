"""The benchmark over a whole population: every model evaluated on the same shifted sets, then the fits.

Produces the arrays the report plots and the paper's population-level numbers: per shift and for
the OOD_d / OOD_t aggregates, the linear fit of OOD robustness on ID robustness (slope, intercept,
R^2) over all models and over the adversarially trained ones, each model's effective robustness,
and how many models lose robustness out of distribution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from testbed.data import Dataset
from testbed.workloads.oodrobust.benchmark import build_shifted_sets, evaluate_ood
from testbed.workloads.oodrobust.config import OodConfig
from testbed.workloads.oodrobust.fit import effective_robustness, fit_line
from testbed.workloads.oodrobust.population import MemberSpec


def evaluate_population(models: list[nn.Module], specs: list[MemberSpec], test_set: Dataset, config: OodConfig,
                        seed: int, id_only: bool = False) -> dict[str, Any]:
    """Per-model results (``results``), the arrays of the report (``arrays``) and the metrics (``metrics``)."""
    shifted = build_shifted_sets(test_set, config, seed)
    results = [evaluate_ood(model, test_set, config, seed, shifted, id_only) for model in models]
    column = lambda key: np.array([r[key] for r in results], dtype=np.float64)
    arrays: dict[str, np.ndarray] = {
        "labels": np.array([s.label for s in specs]), "groups": np.array([s.group for s in specs]),
        "train_epsilon": np.array([s.epsilon for s in specs]),
        "id_clean": column("clean_accuracy"), "id_robust": column("id_robust"),
    }
    metrics = {"test_accuracy": float(arrays["id_clean"].mean()), "test_id_robust": float(arrays["id_robust"].mean())}
    if id_only:
        return {"results": results, "arrays": arrays, "metrics": metrics}
    dataset_shifts, threats = list(shifted.dataset_shifts), list(config.threats)
    arrays.update(ood_d_clean=column("ood_d_clean"), ood_d_robust=column("ood_d_robust"),
                  ood_t_robust=column("ood_t_robust"), shift_names=np.array(dataset_shifts + threats),
                  shift_kinds=np.array(["dataset"] * len(dataset_shifts) + ["threat"] * len(threats)),
                  shift_robust=np.stack([column(f"robust/{s}") for s in dataset_shifts + threats], axis=1))
    arrays.update(fit_arrays(arrays))
    metrics.update(population_metrics(arrays))
    return {"results": results, "arrays": arrays, "metrics": metrics}


def fit_arrays(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-shift fits (rows: slope, intercept, R^2) and the aggregate trends with effective robustness."""
    id_robust = arrays["id_robust"]
    per_shift = [fit_line(id_robust, arrays["shift_robust"][:, i]) for i in range(arrays["shift_robust"].shape[1])]
    trend_d, trend_t = fit_line(id_robust, arrays["ood_d_robust"]), fit_line(id_robust, arrays["ood_t_robust"])
    return {
        "shift_fit": np.array([[f.slope, f.intercept, f.r2] for f in per_shift]).reshape(-1, 3),
        "fit_d": np.array([trend_d.slope, trend_d.intercept, trend_d.r2]),
        "fit_t": np.array([trend_t.slope, trend_t.intercept, trend_t.r2]),
        "effective_robustness_d": effective_robustness(id_robust, arrays["ood_d_robust"], trend_d),
        "effective_robustness_t": effective_robustness(id_robust, arrays["ood_t_robust"], trend_t),
    }


def population_metrics(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """The scalar metrics of a population evaluation (written to metrics.jsonl)."""
    id_robust, ood_d = arrays["id_robust"], arrays["ood_d_robust"]
    adversarial = arrays["train_epsilon"] > 0
    metrics = {
        "test_ood_d_clean": float(arrays["ood_d_clean"].mean()), "test_ood_d_robust": float(ood_d.mean()),
        "test_ood_t_robust": float(arrays["ood_t_robust"].mean()),
        "test_fit_d_slope": float(arrays["fit_d"][0]), "test_fit_d_intercept": float(arrays["fit_d"][1]),
        "test_fit_d_r2": float(arrays["fit_d"][2]),
        "test_fit_t_slope": float(arrays["fit_t"][0]), "test_fit_t_r2": float(arrays["fit_t"][2]),
        "test_ood_d_below_id": float(np.mean(ood_d < id_robust)),
        "test_ood_t_below_id": float(np.mean(arrays["ood_t_robust"] < id_robust)),
        "test_ood_d_retention": float(np.mean(ood_d[id_robust > 0] / id_robust[id_robust > 0])),
    }
    if adversarial.sum() >= 3:  # the paper's trend among robust models only
        metrics["test_fit_d_r2_adversarial"] = fit_line(id_robust[adversarial], ood_d[adversarial]).r2
    for group in sorted(set(arrays["groups"].tolist())):
        members = arrays["groups"] == group
        key = "test_effective_robustness_" + group.replace(" + ", "_").replace(" ", "_")
        metrics[key] = float(arrays["effective_robustness_d"][members].mean())
    return metrics
