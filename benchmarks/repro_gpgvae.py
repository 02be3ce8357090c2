"""Reproduction measurement for the ``gpgvae`` workload: final edge AUCs over seeds 0-2.

Trains the base scenario of scenarios/workloads/gpgvae.yaml (600 steps) for the gated prior with
each gradient estimator, and for the ungated and random priors; prints mean +- std (population
std over the 3 seeds) of the substitute and complement edge ROC-AUC, the prior-alone and
|corr| AUCs, the type accuracy and the estimator's gradient spread. The numbers equal those of
``testbed run scenarios/workloads/gpgvae.yaml`` (its sweep), computed in one process.
Not a test. Usage: python benchmarks/repro_gpgvae.py
"""

from __future__ import annotations

import numpy as np
import yaml

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SCENARIO = "scenarios/workloads/gpgvae.yaml"
VARIANTS = {"gpgvae (relaxed)": {"variant": "gpgvae", "estimator": "relaxed"},
            "gpgvae (score)": {"variant": "gpgvae", "estimator": "score"},
            "ungated": {"variant": "ungated"}, "random": {"variant": "random"}}
METRICS = ("test_auc_substitute", "test_auc_complement", "test_prior_auc_substitute", "test_corr_auc_substitute",
           "test_type_accuracy", "test_grad_std")
SEEDS = (0, 1, 2)


def final_metrics(seed: int, workload: dict) -> dict[str, float]:
    """The final evaluation of one run of the base scenario with ``workload`` overrides."""
    with open(SCENARIO) as handle:
        raw = yaml.safe_load(handle)
    raw.pop("sweep")
    raw["seed"] = seed
    raw["workload"].update(workload)
    scenario = validate_raw(raw, SCENARIO)
    model = build_workload(scenario)
    model.train(scenario.training.steps)
    return model.evaluate()


def main() -> None:
    with single_threaded():
        for label, workload in VARIANTS.items():
            runs = [final_metrics(seed, workload) for seed in SEEDS]
            summary = ", ".join(f"{m.removeprefix('test_')} {np.mean([r[m] for r in runs]):.3f} "
                                f"± {np.std([r[m] for r in runs]):.3f}" for m in METRICS)
            print(f"{label}: {summary}", flush=True)


if __name__ == "__main__":
    main()
