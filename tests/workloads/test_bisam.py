"""BiSAM: the lower bound of the 0-1 loss, the perturbation that really ascends it, resume, config errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.bisam.optimizer import BiSAM
from testbed.workloads.bisam.surrogate import LowerBoundSurrogate, phi_neg_log, phi_tanh, zero_one_loss
from testbed.workloads.bisam.workload import PROFILE_SAMPLES, corrupt_labels, perturbation_profile
from testbed.workloads.runner import build_workload

SURROGATES = [LowerBoundSurrogate("neg_log", 1.0), LowerBoundSurrogate("neg_log", 10.0),
              LowerBoundSurrogate("tanh", 1.0, 0.1), LowerBoundSurrogate("tanh", 10.0, 2.0)]


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "bisam", **workload}, "training": {"steps": 100}}, "s.yaml")


def random_logits(seed: int, rows: int = 4000, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scale = torch.rand(rows, 1, generator=generator) * 20  # from near-ties to confident logits
    logits = torch.randn(rows, classes, generator=generator, dtype=torch.float64) * scale
    return logits, torch.randint(0, classes, (rows,), generator=generator)


@pytest.mark.parametrize("surrogate", SURROGATES, ids=lambda s: f"{s.name}-mu{s.mu}")
def test_surrogate_is_a_lower_bound_of_the_zero_one_loss(surrogate):
    logits, targets = random_logits(1)
    errors = zero_one_loss(logits, targets)
    assert 0.2 < errors.mean() < 0.98  # both correct and wrong samples are checked
    hard = surrogate.hard_max(logits, targets)
    smooth = surrogate.per_sample(logits, targets)
    assert torch.all(hard <= errors)
    assert torch.all(smooth <= hard + 1e-12)
    # the log-sum-exp smoothing costs at most log(K)/mu below the max
    assert torch.all(smooth >= hard - math.log(10) / surrogate.mu - 1e-12)
    assert torch.all(hard[errors == 0] == 0)  # correct samples: phi(F_y) = phi(0) = 0 is the max


def test_phi_functions_pass_through_zero_and_stay_under_the_step():
    t = torch.linspace(-50, 50, 20001, dtype=torch.float64)
    step = (t >= 0).to(t.dtype)
    for phi in (phi_neg_log(t), phi_tanh(t, 0.1), phi_tanh(t, 5.0)):
        assert torch.all(phi <= step)
    assert phi_neg_log(torch.zeros(1, dtype=torch.float64)).abs().item() < 1e-15
    assert phi_neg_log(torch.tensor([60.0], dtype=torch.float64)).item() == pytest.approx(1.0, abs=1e-12)


def test_surrogate_tends_to_the_hard_max_as_mu_grows():
    logits, targets = random_logits(2, rows=500)
    hard = LowerBoundSurrogate("neg_log", 1.0).hard_max(logits, targets)
    gaps = [float((hard - LowerBoundSurrogate("neg_log", mu).per_sample(logits, targets)).max())
            for mu in (1.0, 10.0, 100.0, 1000.0)]
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < math.log(10) / 1000 + 1e-9


def tiny_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))


def perturbation_seen_by_the_descent_pass(ascent) -> tuple[list[torch.Tensor], nn.Module, torch.Tensor, torch.Tensor]:
    """Run one step with a spy closure recording the weights of the second (perturbed) pass."""
    model = tiny_model()
    x = torch.randn(64, 6, generator=torch.Generator().manual_seed(3))
    y = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(4))
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = BiSAM(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.3, ascent_loss=ascent)
    seen: list[list[torch.Tensor]] = []

    def closure(loss_fn):
        seen.append([p.detach().clone() for p in model.parameters()])
        return loss_fn(model(x), y)

    optimizer.step(closure)
    assert len(seen) == 2
    reference = tiny_model()  # the same initial weights, for the independent gradients below
    return [after - before for after, before in zip(seen[1], start)], reference, x, y


def unit_gradient(model: nn.Module, loss: torch.Tensor, rho: float) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, list(model.parameters()))
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
    return [rho * g / norm for g in grads]


def written_out_q(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Q_{phi,mu} with phi = -log, mu = 1, written from the paper's formula independently."""
    margins = logits - logits[torch.arange(len(targets)), targets][:, None]
    phi = 1 - torch.log(1 + torch.exp(math.log(math.e - 1) - margins))
    return torch.log(torch.exp(phi).sum(dim=1)).mean()


def test_bisam_perturbation_ascends_the_lower_bound_not_the_cross_entropy():
    eps, reference, x, y = perturbation_seen_by_the_descent_pass(LowerBoundSurrogate("neg_log", 1.0))
    expected = unit_gradient(reference, written_out_q(reference(x), y), 0.3)
    cross_entropy = unit_gradient(reference, F.cross_entropy(reference(x), y), 0.3)
    for got, want in zip(eps, expected):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert sum(float((a - b).norm()) for a, b in zip(expected, cross_entropy)) > 0.05  # the two really differ


def test_sam_perturbation_ascends_the_cross_entropy():
    eps, reference, x, y = perturbation_seen_by_the_descent_pass(F.cross_entropy)
    for got, want in zip(eps, unit_gradient(reference, F.cross_entropy(reference(x), y), 0.3)):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_bisam_workload_perturbs_along_its_surrogate():
    workload = build_workload(scenario(variant="bisam", surrogate="neg_log", mu=1.0, rho=0.1))
    start = [p.detach().clone() for p in workload.model.parameters()]
    batch = workload.stream.order[: workload.stream.batch_size]
    x, y = torch.from_numpy(workload.train_set.x[batch]), torch.from_numpy(workload.train_set.y[batch])
    passes: list[list[torch.Tensor]] = []
    hook = workload.model.register_forward_pre_hook(
        lambda module, args: passes.append([p.detach().clone() for p in module.parameters()]))
    workload.train(1)
    hook.remove()
    reference = workload.build_model()
    reference.load_state_dict({k: v for k, v in zip(reference.state_dict(), start)})
    expected = unit_gradient(reference, written_out_q(reference(x), y), 0.1)
    for got, before, want in zip(passes[1], start, expected):
        torch.testing.assert_close(got - before, want, atol=1e-6, rtol=1e-5)


def test_plain_variant_makes_a_single_pass():
    model = tiny_model()
    optimizer = BiSAM(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.3, ascent_loss=None)
    calls = []
    optimizer.step(
        lambda loss_fn: calls.append(1) or loss_fn(model(torch.ones(2, 6)), torch.zeros(2, dtype=torch.long)))
    assert calls == [1]


def test_symmetric_label_noise_flips_the_exact_fraction_to_other_classes():
    labels = np.repeat(np.arange(10), 50)
    noisy, flipped = corrupt_labels(labels, 10, 0.4, np.random.default_rng(0))
    assert flipped.sum() == 200
    assert np.all(noisy[flipped] != labels[flipped]) and np.all(noisy[~flipped] == labels[~flipped])


@pytest.mark.slow
def test_bisam_beats_sgd_under_label_noise():
    # Calibrated on seeds 0-2 (3000 steps, 40% noise, rho 0.2): SGD 0.673 +- 0.009, BiSAM 0.773 +- 0.005.
    accuracy = {}
    for variant in ("sgd", "bisam"):
        workload = build_workload(scenario(seed=0, variant=variant, label_noise=0.4, rho=0.2))
        workload.train(3000)
        accuracy[variant] = workload.evaluate()["test_accuracy"]
    assert accuracy["bisam"] >= accuracy["sgd"] + 0.05


def test_artifacts_show_the_lower_bound_under_the_error_of_the_trained_model():
    """Catches a profile taken on other samples or another model state than the report says: at radius 0 both
    profiles are the trained model's 0-1 error on the first training samples, computed here directly."""
    workload = build_workload(scenario(variant="bisam", hidden=32))
    workload.train(50)
    workload.model.eval()
    with torch.no_grad():
        x = torch.from_numpy(workload.train_set.x[:PROFILE_SAMPLES])
        error = float((workload.model(x).argmax(dim=1) != torch.from_numpy(workload.train_set.y[:PROFILE_SAMPLES]))
                      .double().mean())
    arrays = workload.artifacts()
    assert 0.05 < error < 0.9
    assert np.all(arrays["profile_surrogate"] <= arrays["profile_error_surrogate"] + 1e-9)
    assert arrays["profile_radius"][0] == 0
    assert arrays["profile_error_surrogate"][0] == pytest.approx(error)
    assert arrays["profile_error_ce"][0] == pytest.approx(error)
    assert arrays["profile_error_surrogate"][-1] > error  # 20 rho along the ascent direction: the error grows


def test_profile_of_a_two_logit_model_has_its_closed_form():
    """Catches a profile that does not step along the *unit* gradient, that does not undo one radius before the
    next, or that descends: for logits (w0, w1) = (1, 0) on x = 1 with label 0 both directions are (-1, 1)/sqrt 2,
    so at radius r the margin is -1 + r sqrt 2 and every sample is wrong exactly beyond r = 1/sqrt 2."""
    model = nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0], [0.0]]))
    x, y = torch.ones(8, 1), torch.zeros(8, dtype=torch.long)
    radii = np.array([0.0, 0.5, 0.7, 0.72, 1.0, 2.0, 3.0])
    profile = perturbation_profile(model, LowerBoundSurrogate("neg_log", 1.0), x, y, radii)
    errors = (radii > 1 / math.sqrt(2)).astype(float)
    np.testing.assert_array_equal(profile["profile_error_surrogate"], errors)
    np.testing.assert_array_equal(profile["profile_error_ce"], errors)
    margin = -1 + radii * math.sqrt(2)
    phi = 1 - np.log1p(np.exp(math.log(math.e - 1) - margin))  # the paper's -log function
    np.testing.assert_allclose(profile["profile_surrogate"], np.log((1 + np.exp(phi)) / 2), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.weight.detach(), torch.tensor([[1.0], [0.0]]))  # put back afterwards


def test_profile_follows_each_direction_and_not_the_other():
    """Catches swapped directions (the BiSAM curve along grad CE or the SAM curve along grad Q) or a surrogate
    curve taken off its direction: an independent copy of the model moved by r times each unit gradient must
    give the same errors and lower bound, and the two directions' errors differ by far more than one sample."""
    model = tiny_model()
    x = torch.randn(256, 6, generator=torch.Generator().manual_seed(5))
    y = torch.randint(0, 4, (256,), generator=torch.Generator().manual_seed(6))
    radii = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    profile = perturbation_profile(model, LowerBoundSurrogate("neg_log", 1.0), x, y, radii)
    expected: dict[str, list[float]] = {"surrogate": [], "ce": [], "bound": []}
    for name, loss in {"surrogate": written_out_q, "ce": F.cross_entropy}.items():
        for radius in radii:
            moved = tiny_model()
            direction = unit_gradient(moved, loss(moved(x), y), 1.0)
            with torch.no_grad():
                for param, step in zip(moved.parameters(), direction):
                    param.add_(step, alpha=float(radius))
                expected[name].append(float(zero_one_loss(moved(x), y).mean()))
                if name == "surrogate":  # the paper's Q minus its log(K)/mu overshoot
                    expected["bound"].append(float(written_out_q(moved(x), y)) - math.log(4))
        np.testing.assert_allclose(profile[f"profile_error_{name}"], expected[name], atol=1.5 / len(y))
    np.testing.assert_allclose(profile["profile_surrogate"], expected["bound"], atol=1e-5)
    assert np.abs(np.subtract(expected["surrogate"], expected["ce"])).max() > 8 / len(y)  # 0.82 vs 0.76 at r = 1


@pytest.mark.parametrize("field, value", [
    ("variant", "adam"), ("rho", -0.1), ("rho", 0), ("label_noise", 1.0), ("label_noise", -0.1),
    ("mu", 0), ("surrogate", "hinge"), ("alpha", -1), ("batch_size", 0), ("label_smoothing", 1.0),
    ("lr_schedule", "step"), ("validation_fraction", 1.0), ("schedule_steps", 0),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})


def test_federated_clients_train_with_the_sharpness_aware_update(monkeypatch):
    from testbed.workloads.bisam import workload as module
    from testbed.workloads.bisam.workload import BiSAMWorkload

    workload = build_workload(scenario(variant="bisam", hidden=32))
    ascents = []
    original = module.LowerBoundSurrogate.__call__
    monkeypatch.setattr(module.LowerBoundSurrogate, "__call__",
                        lambda self, logits, y: ascents.append(1) or original(self, logits, y))
    model = BiSAMWorkload.model_for(workload.config, workload.train_set)
    before = BiSAMWorkload.evaluate_model(model, workload.test_set)["test_accuracy"]
    loss = BiSAMWorkload.fit_client(model, workload.train_set, workload.config, 2,
                                    torch.Generator().manual_seed(0), proximal_mu=0.1)
    after = BiSAMWorkload.evaluate_model(model, workload.test_set)["test_accuracy"]
    assert len(ascents) == 2 * math.ceil(len(workload.train_set.y) / 32)  # one ascent per batch
    assert math.isfinite(loss) and after > before + 0.3


def test_closure_knows_which_pass_it_computes():
    model = tiny_model()
    optimizer = BiSAM(torch.optim.SGD(model.parameters(), lr=0.1), rho=0.3, ascent_loss=F.cross_entropy)
    passes = []

    def closure(loss_fn):
        passes.append(optimizer.in_ascent)
        return loss_fn(model(torch.ones(4, 6)), torch.zeros(4, dtype=torch.long))

    optimizer.step(closure)
    assert passes == [True, False] and not optimizer.in_ascent


def test_schedulers_drive_the_base_optimizer_through_the_wrapper():
    model = tiny_model()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = BiSAM(base, rho=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    optimizer.step(lambda loss_fn: loss_fn(model(torch.ones(4, 6)), torch.zeros(4, dtype=torch.long)))
    scheduler.step()
    assert base.param_groups[0]["lr"] == pytest.approx(0.05)
    restored = BiSAM(torch.optim.SGD(tiny_model().parameters(), lr=0.1, momentum=0.9), rho=0.05)
    restored.load_state_dict(optimizer.state_dict())
    assert restored.param_groups is restored.base.param_groups and restored.param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_cosine_schedule_needs_its_horizon():
    with pytest.raises(ScenarioError, match=r"workload\.schedule_steps: lr_schedule 'cosine' needs its horizon"):
        scenario(lr_schedule="cosine")


def test_the_cosine_schedule_runs_from_lr_to_zero_across_train_calls():
    workload = build_workload(scenario(lr=0.08, lr_schedule="cosine", schedule_steps=20, hidden=16))
    seen = []
    original = workload.optimizer.base.step

    def record(*args, **kwargs):
        seen.append(workload.optimizer.param_groups[0]["lr"])
        return original(*args, **kwargs)

    workload.optimizer.base.step = record
    workload.train(10)
    workload.train(10)  # the second call continues the schedule from step 10
    expected = [0.08 * (1 + math.cos(math.pi * t / 20)) / 2 for t in range(20)]
    np.testing.assert_allclose(seen, expected)


def test_label_smoothing_reaches_the_descended_and_sams_ascent_loss():
    logits, y = torch.randn(16, 10), torch.randint(0, 10, (16,))
    smoothed = F.cross_entropy(logits, y, label_smoothing=0.1)
    for variant in ("sam", "sgd"):
        workload = build_workload(scenario(variant=variant, label_smoothing=0.1, hidden=16))
        assert torch.isclose(workload.optimizer.upper_loss(logits, y), smoothed)
    sam = build_workload(scenario(variant="sam", label_smoothing=0.1, hidden=16)).optimizer
    assert torch.isclose(sam.ascent_loss(logits, y), smoothed)


def test_the_checkpoint_is_selected_on_the_validation_split_not_the_test_set():
    workload = build_workload(scenario(validation_fraction=0.2, label_noise=0.4, hidden=16))
    validation = workload.validation_set
    assert validation is not None
    assert len(validation.y) + len(workload.train_set.y) == 1347  # the 1347 training digits, split
    # Validation labels carry the same noise as training labels (a user has no clean ones).
    assert 0.3 < float(np.mean(validation.y != _clean_labels(workload, validation))) < 0.5
    history = []
    for _ in range(4):
        workload.train(25)
        history.append(workload.evaluate())
    best = max(range(4), key=lambda i: (history[i]["val_accuracy"], -i))
    assert history[-1]["best_val_accuracy"] == history[best]["val_accuracy"]
    assert history[-1]["test_accuracy_at_best_val"] == history[best]["test_accuracy"]


def test_the_selection_survives_a_resume():
    def make():
        return build_workload(scenario(validation_fraction=0.2, hidden=16, lr=0.5))

    straight, split = make(), make()
    for workload in (straight, split):
        workload.train(12)
        first = workload.evaluate()
    restored = make()
    restored.load_state_dict(split.state_dict())
    assert restored.best_validation == (first["val_accuracy"], first["test_accuracy"])
    straight.train(18)
    restored.train(18)
    assert restored.evaluate() == straight.evaluate()


def _clean_labels(workload, split) -> np.ndarray:
    """The true digit labels of ``split``'s images, looked up in the full dataset."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32).reshape(len(bunch.target), -1)
    index = {row.tobytes(): label for row, label in zip(images, bunch.target)}
    return np.array([index[row.reshape(-1).tobytes()] for row in split.x])
