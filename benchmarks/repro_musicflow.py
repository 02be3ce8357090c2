"""MusicFlow reproduction: the scenario's three variants per seed, measured at the end of training.

Usage: ``.venv/bin/python benchmarks/repro_musicflow.py [steps] [seeds...]`` from the repository root (defaults: the
scenario's steps, seeds 0 1 2). Prints one JSON line per seed and variant (FD at each sampler step
count, text adherence, infilling error and pitch accuracy, stage-2 adherence), then mean and std.
The same numbers come from the scenario's sweep (`testbed run scenarios/workloads/musicflow.yaml`).
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

SCENARIO = Path("scenarios/workloads/musicflow.yaml")
VARIANTS = ("musicflow", "nomask", "single")


def measure(seed: int, variant: str, steps: int) -> dict[str, float]:
    """Final metrics of one variant and seed after ``steps`` training steps."""
    raw = yaml.safe_load(SCENARIO.read_text())
    raw.pop("sweep", None)
    raw["seed"], raw["workload"]["variant"] = seed, variant
    with single_threaded():
        workload = build_workload(validate_raw(raw, str(SCENARIO)))
        workload.train(steps)
        return workload.evaluate()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else yaml.safe_load(SCENARIO.read_text())["training"]["steps"]
    seeds = [int(s) for s in sys.argv[2:]] or [0, 1, 2]
    table: dict[str, dict[str, list[float]]] = {}
    for seed in seeds:
        for variant in VARIANTS:
            metrics = measure(seed, variant, steps)
            print(json.dumps({"seed": seed, "variant": variant, **metrics}), flush=True)
            for key, value in metrics.items():
                table.setdefault(variant, {}).setdefault(key, []).append(value)
    for variant, metrics in table.items():
        print(variant, {k: f"{np.mean(v):.3f} ± {np.std(v):.3f}" for k, v in metrics.items()})


if __name__ == "__main__":
    main()
