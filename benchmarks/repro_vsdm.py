"""Reproduction measurement for the ``vsdm`` workload: VSDM against DSM (A = 0) over seeds 0-2.

Settings, 6000 DSM iterations each as in scenarios/workloads/vsdm.yaml: the spiral stretched 8x
along y and the checkerboard stretched 6x along x at beta_max = 10 (VSDM and DSM), plus DSM on the
spiral at beta_max = 20 (the schedule at which plain DSM "works"). Prints mean +- std (population
std over the 3 seeds) of the sliced Wasserstein distances of SDE and ODE samples to held-out data,
the ODE path straightness, and the KL between the forward terminal marginal and the prior.
Not a test. Usage: python benchmarks/repro_vsdm.py
"""

from __future__ import annotations

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

SEEDS = (0, 1, 2)
STEPS = 6000
SETTINGS = {
    "spiral x8, beta_max 10, vsdm": dict(shape="spiral", stretch=8.0, beta_max=10.0, variant="vsdm"),
    "spiral x8, beta_max 10, dsm": dict(shape="spiral", stretch=8.0, beta_max=10.0, variant="dsm"),
    "spiral x8, beta_max 20, dsm": dict(shape="spiral", stretch=8.0, beta_max=20.0, variant="dsm"),
    "checkerboard x6, beta_max 10, vsdm": dict(shape="checkerboard", stretch=6.0, beta_max=10.0, variant="vsdm"),
    "checkerboard x6, beta_max 10, dsm": dict(shape="checkerboard", stretch=6.0, beta_max=10.0, variant="dsm"),
}
METRICS = ("test_sw_sde", "test_sw_ode", "test_straightness_ode", "test_straightness_ode_std", "test_prior_kl")


def final_metrics(seed: int, workload: dict) -> dict[str, float]:
    """Train one workload for STEPS iterations and evaluate it."""
    scenario = validate_raw({"name": "r", "kind": "workload", "seed": seed, "workload": {"name": "vsdm", **workload},
                             "training": {"steps": STEPS}}, "repro.yaml")
    run = build_workload(scenario)
    run.train(STEPS)
    return run.evaluate()


def main() -> None:
    with single_threaded():
        for label, workload in SETTINGS.items():
            results = [final_metrics(seed, workload) for seed in SEEDS]
            cells = []
            for key in METRICS:
                values = np.array([r[key] for r in results])
                cells.append(f"{key.removeprefix('test_')} {values.mean():.4f} ± {values.std():.4f}")
            print(f"{label:36s} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
