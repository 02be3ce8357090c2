"""Reproduction measurement for the ``bisam`` workload: final test accuracy over seeds 0-2.

Settings: clean labels (rho 0.05) and 40% symmetric label noise (rho 0.2), each with SGD, SAM,
BiSAM(-log, mu 1) and BiSAM(tanh, mu 1, alpha 0.1); 3000 steps of batch 32 on the digits MLP,
as in scenarios/workloads/bisam.yaml. Prints mean +- std (population std over the 3 seeds) of
the final and of the best-during-training test accuracy (evaluated every 150 steps).
Not a test. Usage: python benchmarks/repro_bisam.py
"""

from __future__ import annotations

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SETTINGS = {"clean": {"label_noise": 0.0, "rho": 0.05}, "noise40": {"label_noise": 0.4, "rho": 0.2}}
VARIANTS = {"sgd": {"variant": "sgd"}, "sam": {"variant": "sam"},
            "bisam_neg_log": {"variant": "bisam", "surrogate": "neg_log"},
            "bisam_tanh": {"variant": "bisam", "surrogate": "tanh"}}
STEPS, EVAL_EVERY, SEEDS = 3000, 150, (0, 1, 2)


def run(seed: int, workload: dict) -> tuple[float, float]:
    """Final and best test accuracy of one run."""
    scenario = validate_raw({"name": "repro", "kind": "workload", "seed": seed,
                             "workload": {"name": "bisam", **workload}}, "repro")
    model = build_workload(scenario)
    history = []
    for _ in range(STEPS // EVAL_EVERY):
        model.train(EVAL_EVERY)
        history.append(model.evaluate()["test_accuracy"])
    return history[-1], max(history)


def main() -> None:
    with single_threaded():
        for setting, base in SETTINGS.items():
            for label, variant in VARIANTS.items():
                results = np.array([run(seed, {**base, **variant}) for seed in SEEDS])
                mean, std = results.mean(axis=0), results.std(axis=0)
                print(f"{setting:8s} {label:14s} final {100 * mean[0]:.2f} +- {100 * std[0]:.2f}   "
                      f"best {100 * mean[1]:.2f} +- {100 * std[1]:.2f}   per seed {np.round(100 * results[:, 0], 2)}")


if __name__ == "__main__":
    main()
