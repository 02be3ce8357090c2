"""Summarise the OODRobustBench sweep (docs/reproduction/oodrobust.md): mean ± std over seeds.

    nice -n 10 .venv/bin/testbed run scenarios/workloads/oodrobust.yaml --run-dir runs/oodrobust-sweep
    .venv/bin/python benchmarks/repro_oodrobust.py runs/oodrobust-sweep

Prints the aggregate metrics of each variant, then, from the ``ood`` variants' artifacts, the
per-shift slope and R^2 and the share of adversarially trained models below ID under threat shift.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def main(sweep: Path) -> None:
    metrics: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    shifts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    threat_below: list[float] = []
    for folder in sorted((sweep / "variants").iterdir()):
        if not (folder / "summary.json").is_file():
            continue
        variant = folder.name.split(",")[0].split("=")[1]
        for key, value in json.loads((folder / "summary.json").read_text())["final_metrics"].items():
            metrics[variant][key].append(value)
        with np.load(folder / "artifacts.npz") as arrays:
            if "shift_fit" not in arrays:
                continue
            for name, fit in zip(arrays["shift_names"], arrays["shift_fit"]):
                shifts[str(name)].append((fit[0], fit[2]))
            adversarial = arrays["train_epsilon"] > 0
            threat_below.append(float(np.mean(arrays["ood_t_robust"][adversarial] < arrays["id_robust"][adversarial])))
    for variant, values in sorted(metrics.items()):
        print(f"== {variant} ({len(values['test_accuracy'])} seeds)")
        for key, series in sorted(values.items()):
            print(f"  {key:48s} {spread(series)}")
    print("== per shift (ood variant): slope, R^2")
    for name, fits in shifts.items():
        print(f"  {name:20s} slope {spread([f[0] for f in fits])}   R^2 {spread([f[1] for f in fits])}")
    if threat_below:
        print(f"adversarially trained models with OOD_t below ID: {spread(threat_below)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
