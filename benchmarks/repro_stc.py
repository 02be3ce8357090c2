"""Reproduction measurement for the ``stc`` workload: prediction metrics and delayed recall over seeds 0-2.

Prediction: the base scenario of scenarios/workloads/stc.yaml (400 steps) with STC-LIF, LIF and
PLIF neurons; prints mean +- std (population std over the 3 seeds) of MSE, MAE, SSIM and PSNR of
the 5 closed-loop future frames (the numbers of ``testbed run scenarios/workloads/stc.yaml``'s sweep).
Delayed recall: the setting of tests/workloads/test_stc.py (8 channels, delay 8, 120 steps).
Not a test. Usage: python benchmarks/repro_stc.py
"""

from __future__ import annotations

import numpy as np
import yaml

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SCENARIO = "scenarios/workloads/stc.yaml"
NEURONS = ("stc", "lif", "plif")
RECALL = {"task": "recall", "channels": 8, "eval_size": 64}
SEEDS = (0, 1, 2)


def final_metrics(seed: int, workload: dict, steps: int | None = None) -> dict[str, float]:
    """The final evaluation of one run of the base scenario with ``workload`` overrides."""
    with open(SCENARIO) as handle:
        raw = yaml.safe_load(handle)
    raw.pop("sweep")
    raw["seed"] = seed
    raw["workload"].update(workload)
    scenario = validate_raw(raw, SCENARIO)
    model = build_workload(scenario)
    model.train(steps or scenario.training.steps)
    return model.evaluate()


def report(label: str, runs: list[dict[str, float]], metrics: tuple[str, ...]) -> None:
    summary = ", ".join(f"{m.removeprefix('test_')} {np.mean([r[m] for r in runs]):.4f} "
                        f"± {np.std([r[m] for r in runs]):.4f}" for m in metrics)
    print(f"{label}: {summary}", flush=True)


def main() -> None:
    with single_threaded():
        for neuron in NEURONS:
            runs = [final_metrics(seed, {"variant": neuron}) for seed in SEEDS]
            report(f"predict {neuron}", runs, ("test_mse", "test_mae", "test_ssim", "test_psnr"))
        for neuron in ("stc", "lif"):
            runs = [final_metrics(seed, {"variant": neuron, **RECALL}, steps=120) for seed in SEEDS]
            report(f"recall {neuron}", runs, ("test_mse", "test_mse_mean_frame", "test_ssim"))


if __name__ == "__main__":
    main()
