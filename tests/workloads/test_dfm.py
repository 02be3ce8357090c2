"""DFM: rates that keep the marginals, the exact denoiser, eta-invariance, resume, DFM vs D3PM, co-design."""

from __future__ import annotations

import math

import pytest
import torch

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.dfm import codesign as chains
from testbed.workloads.dfm import ctmc
from testbed.workloads.dfm import sequences as seqs
from testbed.workloads.runner import build_workload


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "dfm", **workload}, "training": {"steps": 100}}, "s.yaml")


def path_marginal(p_clean: torch.Tensor, t: float) -> torch.Tensor:
    """``p_t = t p_data + (1 - t) delta_MASK`` for one dimension."""
    return torch.cat([t * p_clean, torch.tensor([1.0 - t], dtype=p_clean.dtype)])


def integrate_master_equation(p_clean: torch.Tensor, eta: float, until: float, rates=ctmc.rate_matrix) -> torch.Tensor:
    """``dp/dt = p R_t`` from the all-MASK state, by classical Runge-Kutta steps on the probability vector."""
    p = path_marginal(p_clean, 0.0)
    steps = 2000
    dt = until / steps
    for step in range(steps):
        t = step * dt
        k1 = p @ rates(p_clean, t, eta)
        k2 = (p + 0.5 * dt * k1) @ rates(p_clean, t + 0.5 * dt, eta)
        k3 = (p + 0.5 * dt * k2) @ rates(p_clean, t + 0.5 * dt, eta)
        k4 = (p + dt * k3) @ rates(p_clean, t + dt, eta)
        p = p + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return p


@pytest.mark.parametrize("eta", [0.0, 1.0, 5.0])
def test_rates_generate_the_masking_path_for_every_eta(eta):
    p_clean = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    for until in (0.5, 0.9):
        p = integrate_master_equation(p_clean, eta, until)
        assert torch.allclose(p, path_marginal(p_clean, until), atol=1e-9)


@pytest.mark.parametrize("eta", [0.0, 3.0])
def test_the_samplers_masking_step_keeps_the_masking_path(eta):
    """Catches a sampler step whose re-masking is not balanced by its unmasking (the eta-boosted rate
    (1 + eta t) / (1 - t)), or that re-masks at the wrong rate: from the path's marginal at t (a share 1 - t
    masked), one `masking_step` of the real sampler must leave a share 1 - t - dt masked and re-mask a share
    eta dt of the unmasked dimensions (the earlier test checked a rate function written in the test)."""
    t, dt, size = 0.4, 0.02, 400_000
    generator = torch.Generator().manual_seed(int(eta))
    x = torch.where(torch.rand(size, generator=generator) < 1 - t, 3, torch.randint(0, 3, (size,), generator=generator))
    probs = torch.full((size, 3), 1 / 3)
    after = ctmc.masking_step(x, probs, t, dt, eta, False, 3, generator)
    sampling = 8 * math.sqrt(0.25 / size)  # the start's share and the step's draws, 4 standard errors each
    assert float((after == 3).double().mean()) == pytest.approx(1 - (t + dt), abs=sampling)
    remasked = float(((after == 3) & (x != 3)).double().sum() / (x != 3).sum())
    assert remasked == pytest.approx(eta * dt, abs=4 * math.sqrt(0.25 / (t * size)))
    unmasked = after[(x == 3) & (after != 3)]
    assert torch.equal(torch.bincount(unmasked, minlength=3).bool(), torch.ones(3, dtype=torch.bool))


def test_euler_step_keeps_the_expected_mask_share_exactly():
    for t in (0.0, 0.3, 0.8):
        for eta in (0.0, 2.0, 7.0):
            dt = 0.01
            masked_after = (1 - t) * (1 - ctmc.unmask_probability(t, dt, eta)) + t * eta * dt
            assert masked_after == pytest.approx(1 - t - dt, abs=1e-12)


def test_exact_denoiser_is_the_posterior_over_consistent_valid_sequences():
    valid = seqs.valid_sequences(3, 4)
    assert len(valid) == seqs.valid_count(3, 4) == 15
    assert bool(seqs.is_valid(valid).all())
    denoiser = seqs.ExactDenoiser(valid, 3, 3)
    x_t = torch.tensor([[3, 1, 3, 3], [3, 3, 3, 3], [0, 0, 2, 2]])
    probs = denoiser(x_t, torch.zeros(3))
    assert torch.allclose(probs.sum(-1), torch.ones(3, 4))
    # Only position 1 is observed (= 1): the posterior is uniform over the valid sequences with a 1 there.
    consistent = valid[(valid[:, 1] == 1)]
    for position in range(4):
        expected = torch.bincount(consistent[:, position], minlength=3).float() / len(consistent)
        assert torch.allclose(probs[0, position], expected.clamp(min=1e-12), atol=1e-9)
    assert torch.allclose(probs[2].argmax(-1), x_t[2])


def test_eta_leaves_the_sample_distribution_unchanged_with_the_exact_denoiser():
    valid = seqs.valid_sequences(3, 5)
    denoiser = seqs.ExactDenoiser(valid, 3, 3)
    tables = {eta: seqs.statistic_table(ctmc.dfm_sample(denoiser, 4000, 5, 3, 400, eta,
                                                        torch.Generator().manual_seed(int(eta))), 3)
              for eta in (0.0, 4.0)}
    data = seqs.statistic_table(seqs.sample_data(valid, 4000, torch.Generator().manual_seed(9)), 3)
    assert seqs.same_distribution_pvalue(tables[0.0], tables[4.0]) > 0.01
    assert seqs.same_distribution_pvalue(tables[4.0], data) > 0.01
    assert tables[4.0][0].sum() < 0.02 * 4000  # almost no invalid samples


def test_chi_square_check_detects_a_different_distribution():
    valid = seqs.valid_sequences(3, 5)
    generator = torch.Generator().manual_seed(0)
    uniform = seqs.statistic_table(seqs.sample_data(valid, 4000, generator), 3)
    skewed = seqs.statistic_table(seqs.sample_data(valid[: len(valid) // 2 + 3], 4000, generator), 3)
    assert seqs.same_distribution_pvalue(uniform, skewed) < 1e-6
    assert seqs.total_variation(uniform, uniform) == 0


def test_folding_rule_and_kabsch_rmsd():
    generator = torch.Generator().manual_seed(0)
    seq = chains.sample_sequences(50, 10, 0.7, generator)
    coords = chains.fold(seq, math.radians(40))
    bonds = (coords[:, 1:] - coords[:, :-1]).norm(dim=-1)
    assert torch.allclose(bonds, torch.ones_like(bonds), atol=1e-5)
    assert torch.allclose(coords.mean(1), torch.zeros(50, 2), atol=1e-5)
    angle = torch.tensor(1.1)
    rotation = torch.tensor([[angle.cos(), -angle.sin()], [angle.sin(), angle.cos()]])
    moved = coords @ rotation.T + torch.tensor([3.0, -2.0])
    assert torch.allclose(chains.kabsch_rmsd(moved, coords), torch.zeros(50), atol=1e-4)
    mirrored = coords * torch.tensor([1.0, -1.0])  # reflections are not superpositions
    turning = (seq != 0).any(1)
    assert bool((chains.kabsch_rmsd(mirrored, coords)[turning] > 1e-3).all())


def test_d3pm_chain_unmasks_a_token_with_probability_one_over_k():
    # At DFM time t = 1 - k/T and dt = 1/T, the eta = 0 Euler step is the D3PM posterior step.
    for steps in (4, 16):
        for k in range(1, steps):
            assert ctmc.unmask_probability(1 - k / steps, 1 / steps, 0.0) == pytest.approx(1 / k)


@pytest.mark.slow
def test_dfm_with_eta_beats_d3pm_at_equal_steps():
    # Calibrated on seeds 0-2 (1200 steps, hidden 128, 8 steps, 1000 samples): DFM eta = 2 validity
    # 0.745 +- 0.011, DFM eta = 0 0.651 +- 0.005, D3PM (T = 8) 0.634 +- 0.018, one-shot 0.018 +- 0.007.
    small = dict(hidden=128, sample_steps=8, eta=2.0)
    flow = build_workload(scenario(**small))
    flow.train(1200)
    diffusion = build_workload(scenario(variant="d3pm", **small))
    diffusion.train(1200)
    dfm, d3pm = flow.evaluate(), diffusion.evaluate()
    assert dfm["test_validity"] >= d3pm["test_validity"] + 0.05
    assert dfm["test_validity_one_shot"] < 0.1  # the CTMC's iterations create the dependencies


@pytest.mark.slow
def test_codesign_is_consistent_far_above_random_pairing():
    # Calibrated on seeds 0-2 (1200 steps, hidden 128, 16 steps): consistency 0.687 +- 0.035,
    # random pairing 0.026 +- 0.006, folding held-out sequences 0.917 +- 0.023.
    workload = build_workload(scenario(task="codesign", hidden=128))
    workload.train(1200)
    metrics = workload.evaluate()
    assert metrics["test_codesign_consistency"] >= 0.5
    assert metrics["test_random_pair_consistency"] <= 0.1
    assert metrics["test_forward_fold_success"] >= 0.8


@pytest.mark.parametrize("field, value", [
    ("variant", "sedd"), ("task", "text8"), ("vocab", 1), ("sample_steps", 0), ("eta", -1.0),
    ("length", 60), ("invariance_steps", 8), ("turn_degrees", 200), ("batch_size", 9000),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})


def test_d3pm_is_refused_for_the_codesign_task():
    with pytest.raises(ScenarioError, match=r"workload\.variant"):
        scenario(task="codesign", variant="d3pm")
