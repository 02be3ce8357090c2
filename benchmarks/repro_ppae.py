"""PPAE reproduction: train the scenario's diffusion model per seed, then edit with PPAE, regeneration and SDEdit.

The diffusion model's training does not depend on the editing variant (PPAE is training-free), so
one trained model per seed serves all three variants; the numbers equal those of the scenario's
sweep. Usage: ``.venv/bin/python benchmarks/repro_ppae.py [steps] [seeds...]`` from the repository root (defaults: the
scenario's steps, seeds 0 1 2); prints one JSON line per seed and variant, then mean and std.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SCENARIO = Path("scenarios/workloads/ppae.yaml")
VARIANTS = ("ppae", "regenerate", "sdedit")


def measure(seed: int, steps: int) -> dict[str, dict[str, float]]:
    """Metrics of every variant after ``steps`` training steps of seed ``seed``."""
    raw = yaml.safe_load(SCENARIO.read_text())
    raw.pop("sweep", None)
    raw["seed"] = seed
    with single_threaded():
        workload = build_workload(validate_raw(raw, str(SCENARIO)))
        workload.train(steps)
        results = {}
        for variant in VARIANTS:
            workload.config = workload.config.model_copy(update={"variant": variant})
            results[variant] = workload.evaluate()
    return results


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else yaml.safe_load(SCENARIO.read_text())["training"]["steps"]
    seeds = [int(s) for s in sys.argv[2:]] or [0, 1, 2]
    table: dict[str, dict[str, list[float]]] = {}
    for seed in seeds:
        for variant, metrics in measure(seed, steps).items():
            print(json.dumps({"seed": seed, "variant": variant, **metrics}), flush=True)
            for key, value in metrics.items():
                table.setdefault(variant, {}).setdefault(key, []).append(value)
    for variant, metrics in table.items():
        print(variant, {k: f"{np.mean(v):.3f} ± {np.std(v):.3f}" for k, v in metrics.items()})


if __name__ == "__main__":
    main()
