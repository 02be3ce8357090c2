"""Metrics and report arrays of the DFM workload.

Sequence task: validity of samples at ``sample_steps`` (DFM with eta and with eta = 0, or the
D3PM chain), of a one-shot factorised sample, and the distance of samples from held-out data.
Once per run (artifacts, it needs a fine grid): the eta-invariance check, samples at eta = 0 and
at ``invariance_eta`` from the learned and from the exact denoiser, for the report to compare by
total variation (against two independent eta = 0 runs) and a chi-square test.
Co-design task: the share of consistent (structure, sequence) pairs against random pairing,
and the folding and inverse-folding success of the same network.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from testbed.workloads.dfm import codesign as chains
from testbed.workloads.dfm import ctmc
from testbed.workloads.dfm import sequences as seqs

STEP_SWEEP = (2, 4, 8, 16, 32, 64)


def _sample(model, config, steps: int, eta: float, generator: torch.Generator) -> torch.Tensor:
    """Samples from the run's own sampler: the CTMC for DFM, the ancestral chain for D3PM (T = steps)."""
    count, length, mask = config.eval_samples, config.length, config.vocab
    if config.variant == "d3pm":
        return ctmc.d3pm_sample(model.probabilities, count, length, mask, steps, generator)
    return ctmc.dfm_sample(model.probabilities, count, length, mask, steps, eta, generator)


def eta_comparison(denoiser, config, generator: torch.Generator, repeat: bool) -> dict[str, np.ndarray]:
    """Statistic tables of an eta = 0 run and an ``invariance_eta`` run (and a second eta = 0 run: the floor)."""
    count, length, mask, steps = config.eval_samples, config.length, config.vocab, config.invariance_steps
    runs = {"eta0": 0.0, "eta_large": config.invariance_eta} | ({"eta0_repeat": 0.0} if repeat else {})
    return {name: seqs.statistic_table(ctmc.dfm_sample(denoiser, count, length, mask, steps, eta, generator),
                                       config.vocab) for name, eta in runs.items()}


def sequence_metrics(model, config, eval_x: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
    """Validity, distance to data and (for DFM) the eta-invariance statistics."""
    samples = _sample(model, config, config.sample_steps, config.eta, generator)
    one_shot = ctmc.one_shot_sample(model.probabilities, config.eval_samples, config.length, config.vocab, generator)
    metrics = {"validity": float(seqs.is_valid(samples).float().mean()),
               "validity_one_shot": float(seqs.is_valid(one_shot).float().mean()),
               "data_tv": seqs.total_variation(seqs.statistic_table(samples, config.vocab),
                                               seqs.statistic_table(eval_x, config.vocab))}
    if config.variant == "dfm":
        plain = _sample(model, config, config.sample_steps, 0.0, generator)
        metrics["validity_eta0"] = float(seqs.is_valid(plain).float().mean())
    return metrics


def sequence_artifacts(model, config, valid: torch.Tensor, eval_x: torch.Tensor,
                       generator: torch.Generator) -> dict[str, np.ndarray]:
    """Validity against the number of steps, and the eta tables of the learned and the exact denoiser."""
    etas = [0.0] if config.variant == "d3pm" else [0.0, config.eta]
    sweep = np.array([[float(seqs.is_valid(_sample(model, config, steps, eta, generator)).float().mean())
                       if eta * 1.0 / steps <= 0.5 else np.nan for steps in STEP_SWEEP] for eta in etas])
    arrays = {"sweep_steps": np.array(STEP_SWEEP), "sweep_etas": np.array(etas), "sweep_validity": sweep,
              "data_table": seqs.statistic_table(eval_x, config.vocab)}
    if config.variant == "dfm":
        exact = seqs.ExactDenoiser(valid, config.vocab, config.vocab)
        for prefix, denoiser in (("learned", model.probabilities), ("exact", exact)):
            tables = eta_comparison(denoiser, config, generator, repeat=prefix == "exact")
            arrays.update({f"{prefix}_{k}": v for k, v in tables.items()})
    return arrays


def _codesign_samples(model, config, scale: float, eval_seq, eval_coords, generator):
    """Co-designed pairs, folded structures of held-out sequences, inverse-folded held-out structures."""
    count, steps, eta = config.eval_samples, config.sample_steps, config.eta
    coords, seq = chains.joint_sample(model, count, steps, eta, generator)
    folded, _ = chains.joint_sample(model, count, steps, eta, generator, given_seq=eval_seq)
    _, designed = chains.joint_sample(model, count, steps, eta, generator, given_coords=eval_coords / scale)
    return coords * scale, seq, folded * scale, designed


def codesign_metrics(model, config, scale: float, eval_seq: torch.Tensor, eval_coords: torch.Tensor,
                     generator: torch.Generator) -> dict[str, float]:
    """Co-design consistency (and its random-pairing floor), folding and inverse-folding success."""
    turn, tau = math.radians(config.turn_degrees), config.rmsd_threshold
    coords, seq, folded, designed = _codesign_samples(model, config, scale, eval_seq, eval_coords, generator)
    rmsd = chains.kabsch_rmsd(chains.fold(seq, turn), coords)
    shuffled = chains.kabsch_rmsd(chains.fold(seq.roll(1, dims=0), turn), coords)
    folding = chains.kabsch_rmsd(chains.fold(eval_seq, turn), folded)
    return {"codesign_consistency": float((rmsd < tau).float().mean()),
            "random_pair_consistency": float((shuffled < tau).float().mean()),
            "codesign_rmsd_median": float(rmsd.median()),
            "forward_fold_success": float((folding < tau).float().mean()),
            "inverse_fold_success": float((chains.kabsch_rmsd(chains.fold(designed, turn), eval_coords) < tau)
                                          .float().mean()),
            "inverse_fold_recovery": float((designed == eval_seq).float().mean())}


def codesign_artifacts(model, config, scale: float, eval_seq: torch.Tensor, eval_coords: torch.Tensor,
                       generator: torch.Generator) -> dict[str, np.ndarray]:
    """Generated chains with their refolded sequences, and the RMSDs of co-designed and random pairs."""
    turn = math.radians(config.turn_degrees)
    coords, seq, _, _ = _codesign_samples(model, config, scale, eval_seq, eval_coords, generator)
    refolded = chains.fold(seq, turn)
    return {"chains": coords[:12].numpy(), "refolded": refolded[:12].numpy(), "chain_seq": seq[:12].numpy(),
            "rmsd_codesign": chains.kabsch_rmsd(refolded, coords).numpy(),
            "rmsd_random": chains.kabsch_rmsd(chains.fold(seq.roll(1, dims=0), turn), coords).numpy(),
            "rmsd_threshold": np.array(config.rmsd_threshold)}
