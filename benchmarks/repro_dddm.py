"""Reproduction measurement for the ``dddm`` workload: DDDM against DDIM (same network size) over seeds 0-2.

Eight 2-D Gaussians with the Pseudo-Huber metric (3000 steps, as scenarios/workloads/dddm.yaml),
and the digits (3000 steps) with the Pseudo-LPIPS-style and the Pseudo-Huber metric for each variant. For 1, 2, 4, 16 and 64 function
evaluations prints mean +- std (population std over the 3 seeds) of the sample-to-data distance
(MMD^2 for the Gaussians, the FID-like distance for digits) and, for the Gaussians, the share of
samples within 3 std of a mode. Not a test.
Usage: python benchmarks/repro_dddm.py [gaussians] [digits]   (default: both)
"""

from __future__ import annotations

import sys

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SEEDS = (0, 1, 2)
STEPS = 3000
SETTINGS = {  # label: (dataset group, workload keys)
    "gaussians dddm": ("gaussians", dict(dataset="gaussians", variant="dddm")),
    "gaussians ddim": ("gaussians", dict(dataset="gaussians", variant="ddim")),
    "digits dddm pseudo-LPIPS": ("digits", dict(dataset="digits", variant="dddm", loss="pseudo_lpips", metric_c=0.01)),
    "digits dddm pseudo-Huber": ("digits", dict(dataset="digits", variant="dddm")),
    "digits ddim pseudo-Huber": ("digits", dict(dataset="digits", variant="ddim")),
    "digits ddim pseudo-LPIPS": ("digits", dict(dataset="digits", variant="ddim", loss="pseudo_lpips", metric_c=0.01)),
}


def final_metrics(seed: int, workload: dict) -> dict[str, float]:
    """Train one workload for STEPS steps and evaluate it."""
    scenario = validate_raw({"name": "r", "kind": "workload", "seed": seed, "workload": {"name": "dddm", **workload},
                             "training": {"steps": STEPS}}, "repro.yaml")
    run = build_workload(scenario)
    run.train(STEPS)
    return run.evaluate()


def main(chosen: list[str]) -> None:
    with single_threaded():
        for label, (group, workload) in SETTINGS.items():
            if chosen and group not in chosen:
                continue
            results = [final_metrics(seed, workload) for seed in SEEDS]
            for key in sorted(results[0], key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1]))):
                values = np.array([r[key] for r in results])
                print(f"{label:26s} {key.removeprefix('test_'):14s} {values.mean():.4f} ± {values.std():.4f}  "
                      f"{np.round(values, 4).tolist()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
