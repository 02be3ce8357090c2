"""Reproduction measurement for the ``dddm`` workload: DDDM against DDIM (same network size) over seeds 0-2.

Eight 2-D Gaussians with the Pseudo-Huber metric (3000 steps, as scenarios/workloads/dddm.yaml),
and the digits with the Pseudo-LPIPS-style metric (3000 steps). For 1, 2, 4, 16 and 64 function
evaluations prints mean +- std (population std over the 3 seeds) of the sample-to-data distance
(MMD^2 for the Gaussians, the FID-like distance for digits) and, for the Gaussians, the share of
samples within 3 std of a mode. Not a test. Usage: python benchmarks/repro_dddm.py
"""

from __future__ import annotations

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SEEDS = (0, 1, 2)
STEPS = 3000
SETTINGS = {
    "gaussians": dict(dataset="gaussians"),
    "digits": dict(dataset="digits", loss="pseudo_lpips", metric_c=0.01),
}


def final_metrics(seed: int, workload: dict) -> dict[str, float]:
    """Train one workload for STEPS steps and evaluate it."""
    scenario = validate_raw({"name": "r", "kind": "workload", "seed": seed, "workload": {"name": "dddm", **workload},
                             "training": {"steps": STEPS}}, "repro.yaml")
    run = build_workload(scenario)
    run.train(STEPS)
    return run.evaluate()


def main() -> None:
    with single_threaded():
        for label, settings in SETTINGS.items():
            for variant in ("dddm", "ddim"):
                results = [final_metrics(seed, {**settings, "variant": variant}) for seed in SEEDS]
                for key in sorted(results[0], key=lambda k: (k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1]))):
                    values = np.array([r[key] for r in results])
                    print(f"{label:9s} {variant:4s} {key.removeprefix('test_'):14s} {values.mean():.4f} ± "
                          f"{values.std():.4f}  {np.round(values, 4).tolist()}", flush=True)


if __name__ == "__main__":
    main()
