"""VSDM: closed-form kernels, the A-update loss, simulation-free training, resume, VSDM against DSM."""

from __future__ import annotations

import pytest
import torch

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.runner import build_workload
from testbed.workloads.vsdm import bridge as bridge_module
from testbed.workloads.vsdm.dynamics import (
    Schedule,
    conditional_covariance,
    mean_factor,
    simulate_forward,
)
from testbed.workloads.vsdm.shapes import gaussian_kl, sliced_wasserstein, straightness
from tests.workloads.helpers import resumed_and_uninterrupted

SCHEDULE = Schedule(0.1, 10.0, 1.7)


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "vsdm", **workload}, "training": {"steps": 100}}, "s.yaml")


def test_kernels_reduce_to_the_scalar_vp_sde_for_a_zero_and_diagonal_a():
    t = torch.linspace(0.01, 1, 7, dtype=torch.float64)
    b = SCHEDULE.integral(t)
    zero = torch.zeros(2, 2, dtype=torch.float64)
    identity = torch.eye(2, dtype=torch.float64)
    assert torch.allclose(mean_factor(SCHEDULE, zero, t), torch.exp(-0.5 * b)[:, None, None] * identity)
    assert torch.allclose(conditional_covariance(SCHEDULE, zero, t),
                          (1 - torch.exp(-b))[:, None, None] * torch.eye(2, dtype=torch.float64), atol=1e-12)
    # Diagonal A: each axis is a scalar OU process with rate d_i = 1 - 2 a_i, variance (1 - e^{-B d_i}) / d_i.
    a = torch.diag(torch.tensor([0.3, -0.7], dtype=torch.float64))
    d = 1 - 2 * a.diagonal()
    expected = (1 - torch.exp(-b[:, None] * d)) / d
    assert torch.allclose(conditional_covariance(SCHEDULE, a, t).diagonal(dim1=1, dim2=2), expected, atol=1e-12)


def test_integral_of_the_schedule_matches_quadrature():
    t = torch.linspace(0, 1, 20001, dtype=torch.float64)
    numeric = torch.cumulative_trapezoid(SCHEDULE.beta(t), t)
    assert torch.allclose(numeric[-1], SCHEDULE.integral(torch.tensor(1.0, dtype=torch.float64)), rtol=1e-8)


def test_closed_form_covariance_matches_simulated_forward_paths():
    generator = torch.Generator().manual_seed(0)
    a = torch.tensor([[0.2, -0.4], [0.3, -0.6]])  # not symmetric: D and D^T differ
    x0 = torch.randn(20000, 2, generator=generator) * torch.tensor([1.0, 6.0])
    paths = simulate_forward(SCHEDULE, a, x0, 1000, generator)
    for step in (300, 1000):
        t = torch.tensor([step / 1000])
        m = mean_factor(SCHEDULE, a, t)[0]
        closed = m @ torch.cov(x0.T) @ m.T + conditional_covariance(SCHEDULE, a, t)[0]
        simulated = torch.cov(paths[step].T)
        assert torch.allclose(simulated, closed, atol=0.05 * closed.abs().max())


def test_a_update_gradient_is_the_closed_form_of_the_sb_fbsde_loss():
    workload = build_workload(scenario(time_steps=10))
    bridge = workload.bridge
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        workload.a.copy_(torch.tensor([[0.1, -0.2], [0.05, -0.3]]))
    path = torch.randn(11, 64, 2, generator=generator)
    policies = torch.randn(11, 64, 2, generator=generator)
    zeta = 0.75
    loss = bridge.forward_policy_loss(path, policies, zeta)
    (gradient,) = torch.autograd.grad(loss, workload.a)
    index = torch.arange(10, -1, -1)
    beta = SCHEDULE.beta(bridge.times[index])
    dt = torch.diff(bridge.times, prepend=torch.zeros(1))[index]
    expected = torch.zeros(2, 2)
    for k in range(11):  # d/dA of 1/2 beta |Ax|^2 + sqrt(beta) (Ax).z_b + zeta beta tr(A), times dt
        x, z = path[k], policies[k]
        term = beta[k] * workload.a.detach() @ (x.T @ x) / 64 + beta[k].sqrt() * (z.T @ x) / 64
        expected += dt[k] * (term + zeta * beta[k] * torch.eye(2))
    assert torch.allclose(gradient, expected, atol=1e-5)


def test_exact_score_with_a_matched_prior_reproduces_the_data_covariance():
    workload = build_workload(scenario(stretch=8.0))
    bridge = workload.bridge
    data_cov = torch.diag(torch.tensor([1.0, 64.0]))
    bridge.data_cov = data_cov
    variances = {}
    for name, a in {"dsm": torch.zeros(2, 2), "contracting": torch.diag(torch.tensor([0.0, -1.0]))}.items():
        with torch.no_grad():
            workload.a.copy_(a)
        bridge.refresh()
        marginal = bridge.kernels.mean @ data_cov @ bridge.kernels.mean.transpose(1, 2) + bridge.kernels.covariance
        bridge.score = lambda x, i, marginal=marginal: -x @ torch.linalg.inv(marginal[i]).T  # the exact Gaussian score
        samples, _ = bridge.sample_sde(20000, torch.Generator().manual_seed(2))
        variances[name] = torch.cov(samples.T).diagonal()
    # With A = 0 the stretched axis never reaches the prior, and the sampler shrinks it (the DSM failure).
    assert variances["dsm"][1] < 0.75 * 64
    assert abs(variances["contracting"][1] / 64 - 1) < 0.08 and abs(variances["contracting"][0] - 1) < 0.08


def test_score_training_never_simulates_and_a_moves_only_between_stages(monkeypatch):
    workload = build_workload(scenario(stage_steps=5, a_paths=16, a_steps=2, time_steps=10))

    def forbidden(*args, **kwargs):
        raise AssertionError("the DSM step must not simulate an SDE")

    original = bridge_module.Bridge.sample_sde
    monkeypatch.setattr(bridge_module.Bridge, "sample_sde", forbidden)
    workload.train(5)
    assert torch.count_nonzero(workload.a) == 0
    monkeypatch.setattr(bridge_module.Bridge, "sample_sde", original)
    workload.train(1)  # the first step of stage 1 updates A from simulated backward paths
    assert torch.count_nonzero(workload.a) > 0
    baseline = build_workload(scenario(variant="dsm", stage_steps=5, time_steps=10))
    monkeypatch.setattr(bridge_module.Bridge, "sample_sde", forbidden)
    baseline.train(12)
    assert torch.count_nonzero(baseline.a) == 0


def test_metrics_are_zero_or_one_at_their_ideal():
    points = torch.randn(500, 2, generator=torch.Generator().manual_seed(3))
    assert sliced_wasserstein(points, points) == 0
    line = torch.linspace(0, 1, 11)[:, None, None] * torch.tensor([[3.0, -4.0]])
    assert straightness(line) == pytest.approx(1.0)
    assert gaussian_kl(torch.zeros(2), torch.eye(2) * 2, torch.eye(2) * 2) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("variant", ["vsdm", "dsm"])
def test_resume_continues_bit_exactly(variant):
    config = dict(variant=variant, stage_steps=4, a_paths=32, a_steps=3, time_steps=20, hidden=32, eval_size=200)
    restored, straight = resumed_and_uninterrupted(
        lambda: build_workload(scenario(**config)), split_at=6, total=14)
    assert restored.evaluate() == straight.evaluate()
    assert torch.equal(restored.a, straight.a)
    for mine, theirs in zip(restored.bridge.net.parameters(), straight.bridge.net.parameters()):
        assert torch.equal(mine, theirs)


def test_vsdm_recovers_the_stretched_spiral_where_dsm_fails():
    # Calibrated on seeds 0-2 (2400 steps, 2000 training points): ODE sliced Wasserstein
    # DSM 0.140 +- 0.006, VSDM 0.095 +- 0.010 (ratio 0.62-0.73); prior KL 0.297 vs 0.069;
    # straightness excess (S - 1) DSM 0.0094, VSDM 0.0055 (ratio 0.52-0.66).
    metrics = {}
    for variant in ("dsm", "vsdm"):
        workload = build_workload(scenario(seed=0, variant=variant, train_size=2000, eval_size=1000))
        workload.train(2400)
        metrics[variant] = workload.evaluate()
    dsm, vsdm = metrics["dsm"], metrics["vsdm"]
    assert vsdm["test_sw_ode"] < 0.85 * dsm["test_sw_ode"]
    assert vsdm["test_prior_kl"] < 0.5 * dsm["test_prior_kl"]
    assert vsdm["test_straightness_ode"] - 1 < 0.85 * (dsm["test_straightness_ode"] - 1)


@pytest.mark.parametrize("field, value", [
    ("variant", "sgm"), ("shape", "moons"), ("stretch", 0), ("beta_min", -0.1), ("time_steps", 1),
    ("stage_steps", 0), ("a_paths", -1), ("zeta", -0.5), ("beta_max", 0.05), ("batch_size", 5000),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})
