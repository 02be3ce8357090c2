"""OODRobustBench: attacks inside their budgets and exact on a linear model, monotone corruptions, the
linear fit, OOD below ID for every model of a small zoo, resume, config errors, the federated audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from testbed.data import load_dataset
from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.oodrobust import attacks
from testbed.workloads.oodrobust.benchmark import evaluate_ood
from testbed.workloads.oodrobust.config import OodConfig
from testbed.workloads.oodrobust.fit import effective_robustness, fit_line
from testbed.workloads.oodrobust.shifts import CORRUPTIONS, corrupt
from testbed.workloads.oodrobust.typeset import typeset_digits
from testbed.workloads.runner import build_workload

SMALL: dict[str, Any] = {"population": 6, "widths": [32, 64], "epsilons": [0.1, 0.2],
         "evaluation": {"eval_size": 150, "attack_steps": 10,
                        "corruptions": ["gaussian_noise", "contrast", "translate"],
                        "severities": [3], "threats": ["linf_large", "rotation"]}}


def scenario(seed: int = 0, steps: int = 60, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "oodrobust", **workload}, "training": {"steps": steps}}, "s.yaml")


def images(count: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, 1, 8, 8, generator=generator), torch.randint(0, 10, (count,), generator=generator)


def small_mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


@pytest.mark.parametrize("norm,epsilon", [("linf", 0.1), ("linf", 0.3), ("l2", 0.5), ("l2", 2.0)])
@pytest.mark.parametrize("loss", ["ce", "margin"])
def test_pgd_stays_inside_its_ball_and_the_pixel_box(norm, epsilon, loss):
    x, y = images()
    adversarial, _ = attacks.pgd(small_mlp(), x, y, norm, epsilon, 15, torch.Generator().manual_seed(1), loss)
    delta = (adversarial - x).flatten(1)
    size = delta.abs().amax(dim=1) if norm == "linf" else delta.norm(dim=1)
    assert torch.all(size <= epsilon + 1e-5)
    assert adversarial.min() >= 0 and adversarial.max() <= 1
    training = attacks.pgd_training_examples(small_mlp(), x, y, epsilon, 5, torch.Generator().manual_seed(2))
    assert torch.all((training - x).abs() <= epsilon + 1e-6) and training.min() >= 0 and training.max() <= 1


def test_patch_masks_cover_exactly_one_square_each():
    masks = attacks.patch_masks((8, 8), 2)
    assert masks.shape == (49, 1, 8, 8)
    assert torch.all(masks.sum(dim=(1, 2, 3)) == 4) and torch.all(masks.sum(dim=0) >= 1)


def test_rotation_by_zero_is_the_identity_and_the_threat_is_every_quarter_turn_of_its_grid():
    """Catches a rotation threat that skips grid angles, ORs the angles instead of ANDing them, or reads degrees
    as radians: on the grid -90, 0, 90 degrees the rotations are exact quarter turns, so torch.rot90 gives the
    robust mask independently."""
    x, _ = images(300)
    assert torch.allclose(attacks.rotate(x, torch.zeros(len(x))), x, atol=1e-6)
    model = small_mlp()
    with torch.no_grad():
        y = model(x).argmax(dim=1)
    y[::10] = (y[::10] + 1) % 10  # a few wrong ones, never robust
    expected = attacks.correct_mask(model, x, y)
    for quarter_turns in (1, -1):
        expected &= attacks.correct_mask(model, torch.rot90(x, quarter_turns, (2, 3)), y)
    assert 0.05 < float(expected.float().mean()) < 0.85  # both outcomes among the correctly classified
    assert torch.equal(attacks.rotation_robust(model, x, y, 90.0, angles=3), expected)


def test_ensemble_finds_the_closed_form_worst_case_of_a_linear_model():
    """For logits Wx + b and an L-inf ball away from the pixel box, sample i is robust iff for every
    j != y: (w_y - w_j).x + b_y - b_j > epsilon * ||w_y - w_j||_1; MM-9 reaches exactly that corner."""
    generator = torch.Generator().manual_seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        model[1].weight.copy_(torch.randn(10, 64, generator=generator) * 0.3)
        model[1].bias.zero_()
    x = 0.3 + 0.4 * torch.rand(400, 1, 8, 8, generator=generator)  # epsilon 0.05 never reaches 0 or 1
    with torch.no_grad():
        y = model(x).argmax(dim=1)  # every sample correct, so only the attack decides
        y[::7] = (y[::7] + 1) % 10  # and a few wrong ones, which are never robust
    epsilon, weight, bias = 0.01, model[1].weight.detach(), model[1].bias.detach()
    diff = weight[y][:, None, :] - weight[None, :, :]  # (n, classes, features): w_y - w_j
    margins = torch.einsum("ncf,nf->nc", diff, x.flatten(1)) + (bias[y][:, None] - bias[None, :])
    others = torch.ones(len(y), 10, dtype=torch.bool).scatter_(1, y[:, None], False)
    exact = torch.all((margins > epsilon * diff.abs().sum(dim=2)) | ~others, dim=1)
    found = attacks.ensemble_robust(model, x, y, "linf", epsilon, 10, 1, 9, torch.Generator().manual_seed(4))
    assert 0.1 < exact.float().mean() < 0.9  # both outcomes occur
    assert torch.equal(found, exact)
    # one PGD-CE run is weaker: it can only miss adversarial examples, never invent them
    assert torch.all(found <= attacks.pgd_robust(model, x, y, "linf", epsilon, 10, torch.Generator().manual_seed(5)))


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corruption_severity_is_monotone(name):
    x = torch.from_numpy(load_dataset("digits").x[:200])
    distances = [float((corrupt(x, name, s, torch.Generator().manual_seed(6)) - x).flatten(1).norm(dim=1).mean())
                 for s in range(1, 6)]
    assert all(a < b for a, b in zip(distances, distances[1:])), distances
    for severity in range(1, 6):
        out = corrupt(x, name, severity, torch.Generator().manual_seed(6))
        assert out.shape == x.shape and out.min() >= 0 and out.max() <= 1
    if name in ("gaussian_noise", "impulse_noise", "contrast", "brightness"):  # common random numbers: per pixel
        low, high = (corrupt(x, name, s, torch.Generator().manual_seed(6)) for s in (2, 4))
        assert torch.all((low - x).abs() <= (high - x).abs() + 1e-6)


def test_typeset_digits_are_balanced_8x8_optdigits_images():
    x, y = typeset_digits(40, np.random.default_rng(0))
    assert x.shape == (40, 1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert np.array_equal(np.bincount(y), np.full(10, 4))
    assert np.all(np.round(x * 16) == x * 16)  # block counts 0..16, as in scikit-learn's digits


def test_fit_recovers_a_known_line_and_matches_numpy():
    x = np.linspace(0.1, 0.8, 20)
    exact = fit_line(x, 0.6 * x - 0.05)
    assert (exact.slope == pytest.approx(0.6) and exact.intercept == pytest.approx(-0.05)
            and exact.r2 == pytest.approx(1.0))
    noisy_y = 0.6 * x - 0.05 + np.random.default_rng(0).normal(0, 0.03, len(x))
    noisy = fit_line(x, noisy_y)
    slope, intercept = np.polyfit(x, noisy_y, 1)
    assert noisy.slope == pytest.approx(slope) and noisy.intercept == pytest.approx(intercept)
    assert noisy.r2 == pytest.approx(np.corrcoef(x, noisy_y)[0, 1] ** 2)
    residuals = effective_robustness(x, noisy_y, noisy)
    assert residuals.sum() == pytest.approx(0.0, abs=1e-12) and residuals @ x == pytest.approx(0.0, abs=1e-12)


def box_linf_robust(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                    epsilon: float) -> torch.Tensor:
    """Closed-form L-inf robustness of logits Wx + b in the epsilon-ball intersected with the pixel box [0, 1]: per
    pixel the worst perturbation of the margin (w_y - w_j).x sits at an end of [max(-eps, -x), min(eps, 1 - x)]."""
    flat = x.flatten(1).double()
    low, high = (-flat).clamp(min=-epsilon), (1 - flat).clamp(max=epsilon)
    diff = weight.double()[y][:, None, :] - weight.double()[None, :, :]  # (n, classes, pixels)
    worst = (torch.einsum("ncf,nf->nc", diff, flat) + (bias.double()[y][:, None] - bias.double()[None, :])
             + torch.minimum(diff * low[:, None, :], diff * high[:, None, :]).sum(dim=2))
    others = torch.ones(len(y), weight.shape[0], dtype=torch.bool).scatter_(1, y[:, None], False)
    return torch.all((worst > 0) | ~others, dim=1)


def test_evaluate_ood_attacks_every_dataset_shift_exactly_and_refuses_tabular_data():
    """Catches shifted inputs that are not attacked (robust = clean), shifts whose numbers land under another
    shift's name, or a wrong budget: for a linear model the ensemble's robust accuracy on each shift has a closed
    form (with MM-9 every wrong class is a target), computed here on the shifted sets themselves."""
    from testbed.data import Dataset
    from testbed.workloads.oodrobust.benchmark import build_shifted_sets

    digits = load_dataset("digits")
    flat, y = torch.from_numpy(digits.x).flatten(1).double(), torch.from_numpy(digits.y).long()
    design = torch.cat([flat, torch.ones(len(y), 1, dtype=torch.float64)], 1)
    solution = torch.linalg.pinv(design) @ (5.0 * torch.nn.functional.one_hot(y, 10).double())
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))  # a least-squares linear classifier of the digits
    with torch.no_grad():
        model[1].weight.copy_(solution[:64].T)
        model[1].bias.copy_(solution[64])
    config = OodConfig(eval_size=150, epsilon=0.02, attack_steps=10, margin_classes=9, corruptions=["gaussian_noise"],
                       severities=[1, 5], threats=["patch"])
    shifted = build_shifted_sets(digits, config, seed=1)
    result = evaluate_ood(model, digits, config, seed=1, shifted=shifted)
    assert {"clean/gaussian_noise-1", "robust/gaussian_noise-5", "robust/typeset", "robust/patch",
            "ood_d_robust"} <= set(result)
    weight, bias = model[1].weight.detach(), model[1].bias.detach()
    sets = {"id": (shifted.x, shifted.y), **shifted.dataset_shifts}
    for name, (x, labels) in sets.items():
        clean = attacks.correct_mask(model, x, labels)
        robust = clean & box_linf_robust(weight, bias, x, labels, config.epsilon)
        clean_key, robust_key = ("clean_accuracy", "id_robust") if name == "id" else (f"clean/{name}", f"robust/{name}")
        assert result[clean_key] == pytest.approx(float(clean.float().mean()), abs=1e-12), name
        assert result[robust_key] == pytest.approx(float(robust.float().mean()), abs=1e-12), name
        if name in ("id", "gaussian_noise-1", "typeset"):  # 0.95 -> 0.69, 0.61 -> 0.31, 0.59 -> 0.24
            assert 0.2 < result[robust_key] < result[clean_key] - 0.1  # the attack takes some samples, not all
    assert result["ood_d_robust"] == pytest.approx(np.mean([result[f"robust/{s}"] for s in shifted.dataset_shifts]))
    with pytest.raises(ValueError, match="tabular"):
        evaluate_ood(small_mlp(), Dataset("wine", flat.float().numpy(), y.numpy(), 10, None), config)


def test_small_zoo_loses_robustness_out_of_distribution_for_every_model(seed: int = 0):
    """Calibrated on seeds 0-2 (retention 0.29-0.33, R^2 0.60-0.70, every model below ID). If the shifted
    inputs were not attacked, OOD_d robust would be OOD_d clean (0.3-0.68), above most ID numbers."""
    workload = build_workload(scenario(seed, **SMALL))
    workload.train(60)
    metrics, arrays = workload.evaluate(), workload.artifacts()
    assert np.all(arrays["ood_d_robust"] < arrays["id_robust"])
    assert metrics["test_ood_d_below_id"] == 1.0 and metrics["test_ood_d_retention"] < 0.6
    # The attacks really run, in and out of distribution: seeds 0-2 took at least 0.22 (ID) and 0.18 (OOD_d)
    # off every model's clean accuracy; without an attack robust would equal clean.
    assert np.all(arrays["id_robust"] < arrays["id_clean"] - 0.1)
    assert np.all(arrays["ood_d_robust"] < arrays["ood_d_clean"] - 0.1)
    assert 0 < metrics["test_fit_d_slope"] < 1 and metrics["test_fit_d_r2"] > 0.4
    assert arrays["shift_robust"].shape == (6, 3 + 1 + 2)  # 3 corruptions x 1 severity + typeset, 2 threats


@pytest.mark.parametrize("raw,field", [
    ({"population": 2}, "workload.population"),
    ({"variant": "robustbench"}, "workload.variant"),
    ({"epsilons": [0.1, 1.5]}, "workload.epsilons.1"),
    ({"at_steps": -1}, "workload.at_steps"),
    ({"evaluation": {"severities": [0, 3]}}, "workload.evaluation.severities.0"),
    ({"evaluation": {"threats": ["stadv"]}}, "workload.evaluation.threats.0"),
    ({"evaluation": {"threats": []}}, "workload.evaluation.threats"),
    ({"evaluation": {"corruptions": [], "natural": False}}, "workload.evaluation.corruptions"),
    ({"evaluation": {"severities": []}}, "workload.evaluation.severities"),
])
def test_bad_config_values_are_refused_with_the_field_named(raw, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        scenario(**raw)


def test_other_datasets_and_ood_outside_federated_robustness_reports_are_refused():
    with pytest.raises(ScenarioError, match="data.dataset"):
        validate_raw({"name": "t", "kind": "workload", "data": {"dataset": "wine"}, "workload": {"name": "oodrobust"}},
                     "s.yaml")
    with pytest.raises(ScenarioError, match="report"):
        validate_raw({"name": "t", "kind": "workload", "workload": {"name": "classifier"}, "report": {"ood": {}}},
                     "s.yaml")


@pytest.mark.integration
def test_federated_run_reports_ood_robustness_of_its_final_global_model(tmp_path):
    federated = {
        "name": "fed-ood", "kind": "federated", "seed": 1, "engine": {"type": "local", "num_cpus": 1},
        "data": {"dataset": "digits", "num_clients": 2},
        "workload": {"name": "classifier", "arch": "mlp", "hidden": 32},
        "federated": {"rounds": 1, "local_epochs": 2, "strategy": {"name": "fedavg"}},
        "report": {"kind": "robustness", "ood": {"eval_size": 60, "attack_steps": 5, "corruptions": ["gaussian_noise"],
                                                 "severities": [3], "threats": ["rotation"]}},
    }
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump(federated))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(tmp_path / "run"),
                           "--quiet"], env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert 0 <= final["ood_d_robust"] <= final["ood_d_clean"] <= 1
    assert 0 <= final["ood_id_robust"] <= final["ood_clean_accuracy"] <= 1 and "ood_t_robust" in final
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "Out-of-distribution robustness (final global model)" in page and "ood-shifts.png" in page
    assert "client-labels.png" in page  # the rest of the robustness audit is still there


def hand_made_population() -> dict[str, np.ndarray]:
    """3 non-robust + 4 adversarially trained models whose trends differ: over all 7 models the fits, the shares
    below ID and the retention give other numbers than over the 4 robust ones."""
    from testbed.workloads.oodrobust.population_eval import fit_arrays

    arrays = {
        "train_epsilon": np.array([0, 0, 0, 0.1, 0.1, 0.2, 0.2]),
        "groups": np.array(["standard"] * 3 + ["adversarial"] * 4),
        "id_clean": np.array([0.97, 0.95, 0.96, 0.90, 0.88, 0.85, 0.80]),
        "id_robust": np.array([0.05, 0.10, 0.20, 0.50, 0.55, 0.62, 0.70]),
        "ood_d_clean": np.array([0.70, 0.50, 0.65, 0.60, 0.58, 0.52, 0.49]),
        "ood_d_robust": np.array([0.04, 0.12, 0.10, 0.30, 0.28, 0.38, 0.40]),
        "ood_t_robust": np.array([0.10, 0.15, 0.30, 0.45, 0.50, 0.50, 0.63]),  # the non-robust ones gain
        "shift_names": np.array(["gaussian_noise-2", "gaussian_noise-4", "typeset", "linf_large"]),
        "dataset_shift_clean": np.array([[0.60, 0.30, 0.7], [0.20, 0.10, 0.6], [0.50, 0.45, 0.6], [0.80, 0.70, 0.5],
                                         [0.79, 0.66, 0.5], [0.76, 0.65, 0.4], [0.70, 0.62, 0.4]]),
    }
    noise_robust = np.array([[0.02, 0.0], [0.3, 0.1], [0.1, 0.0], [0.5, 0.1], [0.1, 0.1], [0.5, 0.3], [0.1, 0.2]])
    arrays["shift_robust"] = np.concatenate([noise_robust, arrays["ood_d_robust"][:, None],
                                             arrays["ood_t_robust"][:, None]], axis=1)
    arrays.update(fit_arrays(arrays))
    return arrays


def test_robust_only_metrics_fit_the_adversarially_trained_models_alone():
    """Catches robust-only metrics computed over the whole zoo (or over the wrong members), or the Gaussian-noise
    accuracy trend fitted on robustness: each is checked against numpy on the 4 robust models by hand, and each
    differs from the same number over all 7."""
    from testbed.workloads.oodrobust.population_eval import population_metrics

    arrays = hand_made_population()
    metrics = population_metrics(arrays)
    robust = slice(3, None)
    id_r, ood_d, ood_t = arrays["id_robust"][robust], arrays["ood_d_robust"][robust], arrays["ood_t_robust"][robust]
    r2 = lambda x, y: float(np.corrcoef(x, y)[0, 1] ** 2)
    expected = {
        "test_fit_d_r2_adversarial": r2(id_r, ood_d), "test_fit_d_slope_adversarial": np.polyfit(id_r, ood_d, 1)[0],
        "test_fit_t_r2_adversarial": r2(id_r, ood_t), "test_fit_t_slope_adversarial": np.polyfit(id_r, ood_t, 1)[0],
        "test_ood_t_below_id_adversarial": 1.0, "test_ood_d_below_id_adversarial": 1.0,
        "test_ood_t_retention_adversarial": float(np.mean(ood_t / id_r)),
        "test_ood_d_retention_adversarial": float(np.mean(ood_d / id_r)),
        "test_id_robust_adversarial": float(id_r.mean()), "test_ood_t_robust_adversarial": float(ood_t.mean()),
        "test_fit_noise_clean_r2_adversarial": r2(arrays["id_clean"][robust],
                                                  arrays["dataset_shift_clean"][robust, :2].mean(axis=1)),
        "test_fit_noise_robust_r2_adversarial": r2(id_r, arrays["shift_robust"][robust, :2].mean(axis=1)),
        "test_fit_noise_clean_r2_nonadversarial": r2(arrays["id_clean"][:3],
                                                     arrays["dataset_shift_clean"][:3, :2].mean(axis=1)),
    }
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-12), key
        all_key = key.replace("_adversarial", "").replace("_nonadversarial", "")
        if all_key in metrics:  # the all-model number is another one
            assert abs(metrics[all_key] - metrics[key]) > 0.02, key
    assert metrics["test_ood_t_below_id"] == pytest.approx(4 / 7)  # the non-robust ones gain under threat shift
    assert metrics["test_fit_noise_clean_r2_adversarial"] > 0.9 > 0.5 > metrics["test_fit_noise_robust_r2_adversarial"]
    assert metrics["test_fit_d_r2"] == pytest.approx(float(arrays["fit_d"][2]))


def test_rotation_threat_reaches_the_attack_at_its_configured_strength(monkeypatch):
    """Catches a rotation threat back at 15 degrees, where adversarially trained models lost 0.01 of robustness
    (seed 0, 20-model zoo; 20 degrees took 0.16): the scenario and the default say 20, the configured budget is the
    one the attack gets, and on a trained digits MLP 20 degrees takes clearly more than 15 did."""
    from testbed.workloads.oodrobust.benchmark import threat_shift_robust

    raw = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "../../scenarios/workloads/oodrobust.yaml")))
    assert raw["workload"]["evaluation"]["rotation_degrees"] == 20 == OodConfig().rotation_degrees
    seen: list[float] = []
    real = attacks.rotation_robust
    monkeypatch.setattr(attacks, "rotation_robust", lambda m, x, y, degrees, angles: seen.append(degrees)
                        or real(m, x, y, degrees, angles))
    digits = load_dataset("digits")
    x, y = torch.from_numpy(digits.x[:600]).float(), torch.from_numpy(digits.y[:600]).long()
    model = small_mlp(7)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(150):
        batch = slice((step * 64) % 512, (step * 64) % 512 + 64)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        optimizer.step()
    generator = torch.Generator().manual_seed(0)
    robust = {degrees: float(threat_shift_robust(model, x, y, "rotation", OodConfig(rotation_degrees=degrees),
                                                 generator).float().mean()) for degrees in (15.0, 20.0)}
    assert seen == [15.0, 20.0]
    assert robust[20.0] < robust[15.0] - 0.05, robust
