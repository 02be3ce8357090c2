"""DDDM: the direct parametrisation, the estimate buffer, the samplers, the metrics, resume, config errors."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.dddm import diffusion, metrics
from testbed.workloads.runner import build_workload


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "dddm", **workload}, "training": {"steps": 100}}, "s.yaml")


def test_direct_parametrisation_is_x_t_minus_the_network():
    """Catches x_t + F instead of x_t - F, or a network that is not shown the fed-back estimate: with a last layer
    that outputs a known constant b the estimate is exactly x_t - b (the old check zeroed F, where any sign
    passes), and with the trained weights the estimate input changes the output."""
    torch.manual_seed(0)
    model = diffusion.Denoiser(2, 16, 100, conditioned=True)
    torch.nn.init.zeros_(model.net[-1].weight)
    with torch.no_grad():
        model.net[-1].bias.copy_(torch.tensor([0.5, -2.0]))
    x_t, estimate = torch.randn(5, 2), torch.randn(5, 2)
    torch.testing.assert_close(model(x_t, torch.arange(5), estimate), x_t - torch.tensor([0.5, -2.0]))
    torch.nn.init.normal_(model.net[-1].weight)
    with torch.no_grad():
        assert not torch.allclose(model(x_t, torch.arange(5), estimate), model(x_t, torch.arange(5), -estimate))


def test_buffer_has_one_slot_per_training_sample_refreshed_with_model_estimates(monkeypatch):
    workload = build_workload(scenario(conditioning="buffer", train_size=64, batch_size=16, hidden=16))
    assert workload.estimates.shape == workload.train_x.shape
    before = workload.estimates.clone()
    written = []
    original = diffusion.dddm_step

    def spy(model, x0, estimates, abar, metric, generator, clip=None, guide_weight=1.0):
        loss, fresh = original(model, x0, estimates, abar, metric, generator, clip, guide_weight)
        written.append((x0.clone(), fresh.clone()))
        return loss, fresh

    monkeypatch.setattr(diffusion, "dddm_step", spy)
    workload.train(1)
    (x0, fresh), = written
    changed = (workload.estimates != before).any(1)
    assert 0 < int(changed.sum()) <= 16
    rows = workload.estimates[changed]
    # every refreshed slot holds one of the model's outputs, not the clean sample
    assert all(any(torch.equal(row, f) for f in fresh) for row in rows)
    assert not any(torch.equal(row, x) for row in rows for x in x0)


def test_self_conditioning_computes_the_condition_from_the_same_x_t():
    """Catches a condition taken from anywhere but the same x_t (the buffer's leak), a first pass that
    carries gradients, or a batch that never sees the sampler's start."""
    torch.manual_seed(0)
    model = diffusion.Denoiser(2, 16, 100, conditioned=True)
    calls = []
    forward = model.forward

    def recording(x_t, t, estimate=None):
        out = forward(x_t, t, estimate)
        calls.append((x_t.clone(), t.clone(), estimate.clone(), out.detach().clone(), torch.is_grad_enabled()))
        return out

    model.forward = recording
    x0 = torch.randn(64, 2)
    loss = diffusion.self_conditioned_step(model, x0, diffusion.alpha_bars(100), partial(diffusion.pseudo_huber, c=0.1),
                                           torch.Generator().manual_seed(0))
    (x_a, t_a, start, first, grad_a), (x_b, t_b, condition, _, grad_b) = calls
    assert torch.equal(x_a, x_b) and torch.equal(t_a, t_b)
    assert not grad_a and grad_b and loss.requires_grad
    from_first = (condition == first).all(1)
    from_start = (condition == start).all(1)
    assert bool((from_first | from_start).all()) and 10 < int(from_first.sum()) < 54


def test_guide_weight_adds_the_fixed_point_term_only_on_model_estimates():
    metric = partial(diffusion.pseudo_huber, c=0.1)
    estimate, x0, condition = torch.zeros(4, 2), torch.ones(4, 2), torch.full((4, 2), 3.0)
    is_estimate = torch.tensor([True, False, True, False])
    to_x0, to_condition = metric(estimate, x0), metric(estimate, condition)
    got = diffusion._guided_loss(metric, estimate, x0, condition, is_estimate, 0.25)
    expected = (0.25 * to_x0 + 0.75 * to_condition * is_estimate.float()).mean()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(diffusion._guided_loss(metric, estimate, x0, condition, is_estimate, 1.0), to_x0.mean())
    workload = build_workload(scenario(guide_weight="inverse_epoch", train_size=100, batch_size=50, hidden=16))
    weights = []
    for _ in range(5):
        weights.append(workload.guide_weight())
        workload.train(1)
    assert weights == [1.0, 1.0, 0.5, 0.5, 1 / 3]  # two steps of 50 make an epoch of 100


def test_leak_probe_tells_a_copying_network_from_one_that_denoises():
    class Copying(torch.nn.Module):  # returns its condition: the leak at its worst
        steps = 100

        def forward(self, x_t, t, estimate=None):
            return estimate

    class Ignoring(Copying):  # a fixed function of x_t: the condition carries nothing
        def forward(self, x_t, t, estimate=None):
            return 0.5 * x_t

    abar, x0 = diffusion.alpha_bars(100), metrics.eight_gaussians(200, torch.Generator().manual_seed(0))
    near = x0 + 0.05 * torch.randn(x0.shape, generator=torch.Generator().manual_seed(1))
    own, swapped = diffusion.leak_errors(Copying(), x0, 10, abar, torch.Generator().manual_seed(2), near)
    assert swapped > 20 * own
    own, swapped = diffusion.leak_errors(Ignoring(), x0, 10, abar, torch.Generator().manual_seed(2), near)
    assert swapped == pytest.approx(own)


def test_sampler_fixes_x_T_and_t_and_spends_one_evaluation_per_iteration():
    model = diffusion.Denoiser(2, 16, 100, conditioned=True)
    calls = []
    forward = model.forward

    def counting(x_t, t, estimate=None):
        calls.append((x_t.clone(), t.clone()))
        return forward(x_t, t, estimate)

    model.forward = counting
    diffusion.dddm_sample(model, 7, 2, 5, torch.Generator().manual_seed(0))
    assert len(calls) == 5
    assert all(torch.equal(x, calls[0][0]) for x, _ in calls)
    assert all(bool((t == 99).all()) for _, t in calls)


def test_ddim_with_the_exact_denoiser_reaches_the_data_variance_only_with_many_steps():
    abar = diffusion.alpha_bars(1000)
    scale = 1.7  # data N(0, scale^2 I): E[x_0 | x_t] = sqrt(abar) scale^2 x_t / (abar scale^2 + 1 - abar)

    class Exact(torch.nn.Module):
        steps = 1000

        def forward(self, x_t, t, estimate=None):
            a = abar[t][:, None]
            return a.sqrt() * scale**2 * x_t / (a * scale**2 + 1 - a)

    variance = {n: float(diffusion.ddim_sample(Exact(), abar, 20000, 2, n, torch.Generator().manual_seed(n)).var())
                for n in (1, 200)}
    assert variance[1] < 0.01 * scale**2  # one step predicts the mean
    assert abs(variance[200] / scale**2 - 1) < 0.05


def test_metrics_and_distances():
    a, b = torch.randn(50, 4), torch.randn(50, 4)
    c = 0.1
    assert torch.allclose(diffusion.pseudo_huber(a, b, c), ((a - b).pow(2).sum(1) + c * c).sqrt() - c)
    assert torch.equal(diffusion.pseudo_huber(a, a, c), torch.zeros(50))
    points = metrics.eight_gaussians(500, torch.Generator().manual_seed(0))
    assert metrics.mmd(points, points) == pytest.approx(0.0, abs=1e-6)
    assert metrics.mode_fraction(metrics.CENTRES.repeat(3, 1)) == 1.0
    feats = torch.randn(3000, 3, generator=torch.Generator().manual_seed(1))
    shifted = feats + torch.tensor([1.0, 2.0, 0.0])
    assert metrics.frechet_distance(feats, shifted) == pytest.approx(5.0, rel=1e-6)


def test_pseudo_lpips_is_zero_on_equal_images_and_symmetric():
    workload = build_workload(scenario(dataset="digits", loss="pseudo_lpips", hidden=16))
    metric = workload.metric()
    x, y = workload.train_x[:20], workload.train_x[20:40]
    assert torch.allclose(metric(x, x), torch.zeros(20), atol=1e-6)
    assert torch.allclose(metric(x, y), metric(y, x)) and bool((metric(x, y) > 0).all())


@pytest.mark.parametrize("field, value", [
    ("variant", "consistency"), ("conditioning", "oracle"), ("guide_weight", 0), ("guide_weight", 1.5),
    ("dataset", "cifar10"), ("sample_steps", [4, 16]), ("sample_steps", [0, 1, 2]),
    ("loss", "pseudo_lpips"), ("metric_c", 0), ("diffusion_steps", 1), ("batch_size", 5000), ("lr", -1),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})


@pytest.mark.parametrize("conditioning", ["buffer", "self"])
def test_only_the_buffer_condition_leaks_the_target(conditioning):
    """The audit's probe: swap each training sample's condition for another sample's. Calibrated on seeds
    0-2 (600 steps, hidden 64): buffer 4.0-4.9 at t = 10 and 2.6-2.8 at t = 100; self 1.05-1.07 and 1.01.
    Reverting self conditioning to the per-sample buffer fails the self case."""
    workload = build_workload(scenario(conditioning=conditioning, hidden=64, train_size=500, batch_size=128,
                                       eval_samples=100))
    workload.train(600)
    ratios = workload.leak_ratios()
    if conditioning == "buffer":
        assert ratios["train_leak_ratio_t10"] > 3 and ratios["train_leak_ratio_t100"] > 2
    else:
        assert ratios["train_leak_ratio_t10"] < 1.2 and ratios["train_leak_ratio_t100"] < 1.1
