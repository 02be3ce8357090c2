"""The benchmark over a whole population: every model evaluated on the same shifted sets, then the fits.

Produces the arrays the report plots and the paper's population-level numbers: per shift and for
the OOD_d / OOD_t aggregates, the linear fit of OOD robustness on ID robustness (slope, intercept,
R^2) over all models and over the adversarially trained ones, each model's effective robustness,
and how many models lose robustness out of distribution.

The paper's zoo is 706 adversarially robust models, so every population check is also computed over
the members with ``train_epsilon > 0`` alone (metrics ending in ``_adversarial``): the fits of OOD_d
and OOD_t robustness on ID robustness, the share below ID, the retention and the means. Its
"R^2 0.84 over robust models under Gaussian noise" is a fit of *clean accuracy* (OOD accuracy on
ID accuracy), so the Gaussian-noise accuracy trend is computed too (``test_fit_noise_clean_*``).
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
                  shift_robust=np.stack([column(f"robust/{s}") for s in dataset_shifts + threats], axis=1),
                  dataset_shift_clean=np.array([[r[f"clean/{s}"] for s in dataset_shifts] for r in results],
                                               dtype=np.float64).reshape(len(models), len(dataset_shifts)))
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


NOISE_SHIFT = "gaussian_noise"


def _ratio_mean(ood: np.ndarray, id_robust: np.ndarray) -> float:
    """Mean over models with some ID robustness of OOD / ID robustness (NaN if none has any)."""
    kept = id_robust > 0
    return float(np.mean(ood[kept] / id_robust[kept])) if kept.any() else float("nan")


def drop_metrics(id_robust: np.ndarray, ood_d: np.ndarray, ood_t: np.ndarray, suffix: str = "") -> dict[str, float]:
    """The robustness-drop checks of one set of models: means, share below ID and retention, OOD_d and OOD_t,
    and the slope / R^2 of both trends on ID robustness (the fits need at least 3 models)."""
    metrics = {
        f"test_id_robust{suffix}": float(id_robust.mean()), f"test_ood_d_robust{suffix}": float(ood_d.mean()),
        f"test_ood_t_robust{suffix}": float(ood_t.mean()),
        f"test_ood_d_below_id{suffix}": float(np.mean(ood_d < id_robust)),
        f"test_ood_t_below_id{suffix}": float(np.mean(ood_t < id_robust)),
        f"test_ood_d_retention{suffix}": _ratio_mean(ood_d, id_robust),
        f"test_ood_t_retention{suffix}": _ratio_mean(ood_t, id_robust),
    }
    if len(id_robust) >= 3:
        for kind, ood in (("d", ood_d), ("t", ood_t)):
            fit = fit_line(id_robust, ood)
            metrics[f"test_fit_{kind}_slope{suffix}"], metrics[f"test_fit_{kind}_r2{suffix}"] = fit.slope, fit.r2
    return metrics


def noise_trend_metrics(arrays: dict[str, np.ndarray], members: np.ndarray, suffix: str) -> dict[str, float]:
    """Gaussian-noise trends over ``members`` (severities averaged, as the paper averages a corruption):
    OOD accuracy on ID accuracy (the quantity of the paper's R^2 0.84) and OOD robustness on ID robustness."""
    names = [str(n) for n in arrays["shift_names"][: arrays["dataset_shift_clean"].shape[1]]]
    noise = [i for i, name in enumerate(names) if name.startswith(NOISE_SHIFT + "-")]
    if not noise or members.sum() < 3:
        return {}
    clean = fit_line(arrays["id_clean"][members], arrays["dataset_shift_clean"][members][:, noise].mean(axis=1))
    robust = fit_line(arrays["id_robust"][members], arrays["shift_robust"][members][:, noise].mean(axis=1))
    return {f"test_fit_noise_clean_slope{suffix}": clean.slope, f"test_fit_noise_clean_r2{suffix}": clean.r2,
            f"test_fit_noise_robust_r2{suffix}": robust.r2}


def population_metrics(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """The scalar metrics of a population evaluation (written to metrics.jsonl)."""
    id_robust, ood_d, ood_t = arrays["id_robust"], arrays["ood_d_robust"], arrays["ood_t_robust"]
    adversarial = arrays["train_epsilon"] > 0
    metrics = {"test_ood_d_clean": float(arrays["ood_d_clean"].mean()),
               "test_fit_d_intercept": float(arrays["fit_d"][1])}
    metrics.update(drop_metrics(id_robust, ood_d, ood_t))
    # The paper's zoo is robust models only: the same checks over the adversarially trained members.
    if adversarial.any():
        metrics.update(drop_metrics(id_robust[adversarial], ood_d[adversarial], ood_t[adversarial], "_adversarial"))
    metrics.update(noise_trend_metrics(arrays, adversarial, "_adversarial"))
    metrics.update(noise_trend_metrics(arrays, ~adversarial, "_nonadversarial"))
    for group in sorted(set(arrays["groups"].tolist())):
        members = arrays["groups"] == group
        key = "test_effective_robustness_" + group.replace(" + ", "_").replace(" ", "_")
        metrics[key] = float(arrays["effective_robustness_d"][members].mean())
    return metrics
