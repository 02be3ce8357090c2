"""Reproduction measurement for the ``dfm`` workload over seeds 0-2.

1. Sequence task (non-decreasing, vocab 4, length 12), 3000 training steps as in
   scenarios/workloads/dfm.yaml: validity of DFM samples at 8 and 16 steps with eta = 0 and eta = 2,
   of a one-shot factorised sample, and of the D3PM baseline trained and sampled with T = 8 and 16.
2. Eta-invariance at 1024 Euler steps, eta = 0 against eta = 5: TV and chi-square p-value of the
   (validity, token sum) tables, for the learned denoiser and for the exact one.
3. Co-design task (12-residue chains), 3000 steps as in scenarios/workloads/dfm_codesign.yaml:
   co-design consistency against random pairing, folding and inverse-folding success.
Prints mean +- std (population std over the 3 seeds). Not a test. Usage: python benchmarks/repro_dfm.py
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.determinism import single_threaded
from testbed.loading import validate_raw
from testbed.workloads.dfm import ctmc
from testbed.workloads.dfm import sequences as seqs
from testbed.workloads.dfm.metrics import eta_comparison
from testbed.workloads.dfm.workload import DFMWorkload
from testbed.workloads.runner import build_workload

SEEDS = (0, 1, 2)
STEPS = 3000


def trained(seed: int, **workload):
    """A dfm workload trained for STEPS steps."""
    scenario = validate_raw({"name": "r", "kind": "workload", "seed": seed, "workload": {"name": "dfm", **workload},
                             "training": {"steps": STEPS}}, "repro.yaml")
    run = build_workload(scenario)
    assert isinstance(run, DFMWorkload)
    run.train(STEPS)
    run.model.eval()
    return run


def validity(run, steps: int, eta: float, seed: int) -> float:
    """Validity of 1000 DFM samples."""
    config = run.config
    x = ctmc.dfm_sample(run.model.probabilities, 1000, config.length, config.vocab, steps, eta,
                        torch.Generator().manual_seed(seed))
    return float(seqs.is_valid(x).float().mean())


def invariance(denoiser, config, seed: int) -> tuple[float, float]:
    """TV and chi-square p-value between eta = 0 and eta = invariance_eta samples."""
    tables = eta_comparison(denoiser, config, torch.Generator().manual_seed(seed), repeat=False)
    return (seqs.total_variation(tables["eta0"], tables["eta_large"]),
            seqs.same_distribution_pvalue(tables["eta0"], tables["eta_large"]))


def show(label: str, values: list[float]) -> None:
    print(f"{label:44s} {np.mean(values):.4f} ± {np.std(values):.4f}  {np.round(values, 4).tolist()}", flush=True)


def sequence_rows() -> None:
    rows: dict[str, list[float]] = {}
    for seed in SEEDS:
        run = trained(seed)
        for steps in (8, 16):
            for eta in (0.0, 2.0):
                rows.setdefault(f"DFM validity, {steps} steps, eta {eta:g}", []).append(validity(run, steps, eta, seed))
        one_shot = ctmc.one_shot_sample(run.model.probabilities, 1000, 12, 4, torch.Generator().manual_seed(seed))
        rows.setdefault("one-shot validity", []).append(float(seqs.is_valid(one_shot).float().mean()))
        exact = seqs.ExactDenoiser(run.valid, 4, 4)
        for name, denoiser in (("learned", run.model.probabilities), ("exact", exact)):
            tv, p = invariance(denoiser, run.config, seed)
            rows.setdefault(f"eta 0 vs 5 @1024 steps, {name}: TV", []).append(tv)
            rows.setdefault(f"eta 0 vs 5 @1024 steps, {name}: p-value", []).append(p)
        for steps in (8, 16):
            baseline = trained(seed, variant="d3pm", sample_steps=steps)
            rows.setdefault(f"D3PM validity, T = {steps}", []).append(baseline.evaluate()["test_validity"])
    for label, values in rows.items():
        show(label, values)


def codesign_rows() -> None:
    rows: dict[str, list[float]] = {}
    for seed in SEEDS:
        metrics = trained(seed, task="codesign").evaluate()
        for key in ("codesign_consistency", "random_pair_consistency", "forward_fold_success",
                    "inverse_fold_success", "inverse_fold_recovery"):
            rows.setdefault(key, []).append(metrics[f"test_{key}"])
    for label, values in rows.items():
        show(label, values)


if __name__ == "__main__":
    with single_threaded():
        sequence_rows()
        codesign_rows()
