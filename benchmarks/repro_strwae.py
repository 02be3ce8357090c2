"""Reproduction measurement for the ``strwae`` workload: StrWAE, plain WAE and HSIC-VAE over seeds 0-2.

Digits under four lights, 100 labels, 1500 steps as in scenarios/workloads/strwae.yaml. Prints
mean +- std (population std over the 3 seeds) of the light's predictability from the
representation (LR, RF; chance 0.25), the 100-label digit accuracy from it, the encoder's own
classifier (StrWAE), and the judge's reading of generated and relit images.
Not a test. Usage: python benchmarks/repro_strwae.py
"""

from __future__ import annotations

import numpy as np

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.runners.workload import build_workload

VARIANTS, SEEDS, STEPS = ("strwae", "wae", "vae_hsic"), (0, 1, 2), 1500
METRICS = ("nuisance_accuracy_lr", "nuisance_accuracy_rf", "label_accuracy", "classifier_accuracy",
           "gen_digit_accuracy", "gen_light_accuracy", "relight_digit_accuracy", "relight_light_accuracy",
           "test_recon_mse")


def run(seed: int, variant: str) -> dict[str, float]:
    scenario = validate_raw({"name": "repro", "kind": "workload", "seed": seed,
                             "workload": {"name": "strwae", "variant": variant}}, "repro")
    model = build_workload(scenario)
    model.train(STEPS)
    return model.evaluate()


def main() -> None:
    with single_threaded():
        for variant in VARIANTS:
            results = [run(seed, variant) for seed in SEEDS]
            for metric in METRICS:
                if metric in results[0]:
                    values = np.array([r[metric] for r in results])
                    print(f"{variant:9s} {metric:24s} {values.mean():.3f} +- {values.std():.3f}  {np.round(values, 3)}",
                          flush=True)


if __name__ == "__main__":
    main()
