"""Reproduction measurement for the ``aco`` workload: accuracy and features acquired, seeds 0-2.

Sets: 3-feature parity among 10 (as scenarios/workloads/aco.yaml), the ACO paper's cube (20
features, 8 classes, sigma 0.3) and scikit-learn's breast_cancer (30 features, real). Cost alpha
0.05 per feature, k = 20 neighbours. Prints mean +- std (population std over the 3 seeds) of
accuracy and of the mean number of acquired features for ACO, greedy and random (at ACO's budget).
Not a test. Usage: python benchmarks/repro_aco.py
"""

from __future__ import annotations

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SETS = {
    "parity3": ({"source": "parity", "informative": 3, "num_samples": 3000}, "digits", 2000),
    "cube": ({"source": "cube", "num_samples": 3000}, "digits", 2000),
    "breast_cancer": ({"source": "tabular"}, "breast_cancer", 1000),
}
POLICIES, SEEDS = ("aco", "greedy", "random"), (0, 1, 2)


def run(seed: int, workload: dict, dataset: str, steps: int) -> dict[str, float]:
    scenario = validate_raw({"name": "repro", "kind": "workload", "seed": seed, "data": {"dataset": dataset},
                             "workload": {"name": "aco", "eval_instances": 150, **workload}}, "repro")
    model = build_workload(scenario)
    model.train(steps)
    return model.evaluate()


def main() -> None:
    with single_threaded():
        for name, (workload, dataset, steps) in SETS.items():
            results = [run(seed, workload, dataset, steps) for seed in SEEDS]
            for policy in POLICIES:
                accuracy = np.array([r[f"{policy}_accuracy"] for r in results])
                features = np.array([r[f"{policy}_features"] for r in results])
                print(f"{name:14s} {policy:7s} accuracy {100 * accuracy.mean():.1f} +- {100 * accuracy.std():.1f}"
                      f"   features {features.mean():.2f} +- {features.std():.2f}", flush=True)
            everything = np.array([r["all_features_accuracy"] for r in results])
            print(f"{name:14s} all features accuracy {100 * everything.mean():.1f} +- {100 * everything.std():.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
