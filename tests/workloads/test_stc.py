"""STC: moving digits, the neuron equations, the metrics, delayed recall (STC vs LIF), config
errors, and a federated FedAvg run of the spiking predictor (resume: test_workload_contract.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

from testbed.data import DATASETS
from testbed.data import moving_digits as moving
from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.runner import build_workload
from testbed.workloads.stc.metrics import frame_metrics, ssim
from testbed.workloads.stc.neurons import SpikingLayer, spike


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "moving_digits"},
                         "workload": {"name": "stc", **workload}, "training": {"steps": 10}}, "s.yaml")


def test_bouncing_positions_reflect_off_the_walls():
    positions = moving.bounce(np.array([0, 7]), np.array([2, 1]), 7, limit=8)
    assert positions[:, 0].tolist() == [0, 2, 4, 6, 8, 6, 4]
    assert positions[:, 1].tolist() == [7, 8, 7, 6, 5, 4, 3]


def test_every_frame_holds_the_whole_sprite_on_the_canvas():
    dataset = DATASETS["moving_digits"]()
    assert dataset.x.shape == (1797, moving.FRAMES, moving.CANVAS, moving.CANVAS) and dataset.num_classes == 10
    mass = dataset.x.sum((2, 3))
    np.testing.assert_allclose(mass, mass[:, :1].repeat(moving.FRAMES, 1), rtol=1e-5)  # the sprite never leaves
    assert not np.array_equal(dataset.x[:, 0], dataset.x[:, 1])  # and it moves


def test_spike_is_a_heaviside_step_with_a_sigmoid_surrogate_gradient():
    x = torch.tensor([-1.0, -0.1, 0.0, 0.3], requires_grad=True)
    out = spike(x, alpha=4.0)
    assert out.tolist() == [0.0, 0.0, 1.0, 1.0]
    out.sum().backward()
    sig = torch.sigmoid(4.0 * x.detach())
    torch.testing.assert_close(x.grad, 4.0 * sig * (1 - sig))


def test_lif_membrane_charges_geometrically_towards_a_constant_current():
    layer = SpikingLayer(1, 4, "lif")
    current, membrane = torch.full((1, 4, 2, 2), 0.8), torch.zeros(1, 4, 2, 2)
    for t in range(1, 6):
        membrane = layer.charge(membrane, current, torch.zeros_like(current))  # below threshold: no reset
        torch.testing.assert_close(membrane, 0.8 * (1 - 0.5**t) * torch.ones_like(current))


def test_plif_starts_as_lif_and_learns_its_time_constant():
    layer = SpikingLayer(1, 4, "plif")
    assert float(torch.sigmoid(layer.w.detach())) == pytest.approx(0.5)
    membrane = layer.charge(torch.ones(1, 4, 2, 2), torch.full((1, 4, 2, 2), 3.0), torch.zeros(1, 4, 2, 2))
    membrane.sum().backward()
    assert layer.w.grad is not None and layer.w.grad.abs() > 0


def test_stc_with_silent_pathways_is_a_non_leaky_integrate_and_fire_neuron():
    torch.manual_seed(0)
    layer = SpikingLayer(2, 4, "stc")
    for pathway in (layer.temporal, layer.spatial):
        for parameter in pathway.parameters():
            torch.nn.init.zeros_(parameter)
    inputs = torch.randn(6, 1, 2, 3, 3)
    state = (torch.zeros(1, 4, 3, 3), torch.zeros(1, 4, 3, 3))
    membrane = torch.zeros(1, 4, 3, 3)
    for x in inputs:
        fired, state = layer(x, state)
        charged = membrane + layer.current(x)  # H_t = V_{t-1} + I_t: no leak, no gating
        torch.testing.assert_close(fired, (charged >= 1.0).float())
        membrane = charged - fired
        torch.testing.assert_close(state[0], membrane)


def test_stc_gates_scale_membrane_and_current_by_the_previous_spikes():
    """Catches swapped gates (the temporal one on the current), a gate without its 1 + (tanh alone, or sigmoid),
    or a forward pass that feeds the gates anything but the layer's previous spikes: with hand-set pathways the
    gates have closed forms, 1 + tanh(+-1) where the neuron did or did not fire, and 1 + tanh(-1) on the current."""
    torch.manual_seed(0)
    layer = SpikingLayer(2, 4, "stc").double()
    conv, norm = layer.temporal
    with torch.no_grad():
        conv.weight.zero_()
        conv.weight[:, 0, 1, 1] = 1.0  # C_h (depthwise): each channel sees its own spike at its own pixel
        norm.weight.fill_(1.0)
        norm.bias.zero_()
        layer.spatial[0].weight.zero_()  # C_v: silent convolution, so the gate on the current is 1 + tanh(bias)
        layer.spatial[1].bias.fill_(-1.0)
    spikes = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 4, 1, 2)  # fired at pixel 0, not at pixel 1
    # GroupNorm with one channel a group: (S - 1/2) / sqrt(1/4 + eps) over the two pixels.
    normalised = torch.tensor([0.5, -0.5], dtype=torch.float64) / math.sqrt(0.25 + 1e-5)
    retain, admit = 1 + torch.tanh(normalised), 1 + math.tanh(-1.0)
    membrane = torch.rand(1, 4, 1, 2, dtype=torch.float64)
    x = torch.rand(1, 2, 1, 2, dtype=torch.float64)
    current = layer.current(x)
    expected = membrane * retain + current * admit
    torch.testing.assert_close(layer.charge(membrane, current, spikes), expected)
    fired, (reset, kept) = layer(x, (membrane, spikes))
    torch.testing.assert_close(fired, (expected >= 1.0).double())
    torch.testing.assert_close(reset, expected - fired)
    assert torch.equal(kept, fired)
    assert float(retain[0]) > 1.7 and float(retain[1]) < 0.3  # a neuron that fired keeps more than all of V


def test_if_neuron_integrates_without_leak():
    layer = SpikingLayer(1, 4, "if")
    names = lambda neuron: [name for name, _ in SpikingLayer(1, 4, neuron).named_parameters()]
    assert names("if") == names("lif")  # no time constant, no gate
    membrane, current = torch.full((1, 4, 2, 2), 0.3), torch.full((1, 4, 2, 2), 0.2)
    for t in range(1, 4):
        membrane = layer.charge(membrane, current, torch.zeros_like(current))
        torch.testing.assert_close(membrane, (0.3 + 0.2 * t) * torch.ones_like(current))
    torch.testing.assert_close(layer.charge(membrane, torch.zeros_like(current), torch.zeros_like(current)), membrane)


def test_an_untrained_stc_neuron_that_has_not_fired_is_exactly_an_if_neuron():
    """For silent neurons the gates are exactly 1 at initialisation (the convolutions of zero spikes are 0 and
    GroupNorm's shift starts at 0), so STC-LIF starts as the non-leaky IF control, not as LIF."""
    torch.manual_seed(0)
    stc, integrate = SpikingLayer(2, 8, "stc"), SpikingLayer(2, 8, "if")
    integrate.current.load_state_dict(stc.current.state_dict())
    silent = torch.zeros(3, 8, 4, 4)
    retain, admit = stc.gates(silent)
    assert torch.equal(retain, torch.ones_like(retain)) and torch.equal(admit, torch.ones_like(admit))
    membrane, current = torch.rand(3, 8, 4, 4), torch.randn(3, 8, 4, 4)
    assert torch.equal(stc.charge(membrane, current, silent), integrate.charge(membrane, current, silent))


def test_gate_convolutions_are_grouped_so_stc_is_close_to_lif_in_parameters():
    """Catches full gate convolutions (the authors group them, 16 groups): at the default 16 channels and 2
    layers they made STC-LIF 12,356 parameters against LIF's 3,012 (4.1x); depthwise gates add 2 x (9 + 2) x 16
    a layer, 3,716 (1.23x). The width-matched LIF (18 channels, GroupNorm 6) has 3,712, and the run reports
    the count as the metric ``parameters``."""
    counts = {}
    for variant, extra in (("stc", {}), ("lif", {}), ("plif", {}), ("if", {}), ("stc_full", {"gate_groups": 1}),
                           ("lif_wide", {"channels": 18, "groups": 6})):
        workload = build_workload(scenario(variant=variant.split("_")[0], eval_size=4, **extra))
        counts[variant] = workload.evaluate()["parameters"]
        assert counts[variant] == sum(p.numel() for p in workload.model.parameters())
    temporal = build_workload(scenario(variant="stc", eval_size=4)).model.layers[1].temporal[0]
    assert temporal.groups == 16 and temporal.weight.shape == (16, 1, 3, 3)
    assert counts == {"stc": 3716, "lif": 3012, "plif": 3014, "if": 3012, "stc_full": 12356, "lif_wide": 3712}
    assert counts["stc"] < 1.25 * counts["lif"] and abs(counts["stc"] - counts["lif_wide"]) < 0.01 * counts["stc"]


def test_metrics_have_their_closed_forms():
    target = torch.rand(2, 3, 16, 16) * 0.8
    perfect = frame_metrics(target, target)
    assert perfect["mse"] == 0 and perfect["mae"] == 0 and perfect["ssim"] == pytest.approx(1.0, abs=1e-5)
    shifted = frame_metrics(target + 0.1, target)
    assert shifted["mse"] == pytest.approx(0.01, rel=1e-4) and shifted["mae"] == pytest.approx(0.1, rel=1e-4)
    assert shifted["psnr"] == pytest.approx(20.0, abs=1e-3)  # 10 log10(1 / 0.01)
    assert float(ssim(target, torch.rand(2, 3, 16, 16)).mean()) < 0.5


@pytest.mark.slow
def test_delayed_recall_is_solved_by_stc_and_by_the_nonleaky_if_control_not_by_lif():
    """Calibrated on seeds 0-4 (120 steps, 8 channels, delay 8, depthwise gates): STC/LIF MSE ratio 0.54, 0.65,
    0.67, 0.75, 0.77; LIF/chance 0.93, 1.05, 0.99, 1.04, 0.96; IF/STC 0.71, 0.71, 0.77, 0.55, 0.46 (the non-leaky
    IF neuron, which a silent untrained STC neuron is, recalls better on every seed; docs/reproduction/stc.md).
    Seed 0 here."""
    mse = {}
    for variant in ("stc", "lif", "if"):
        workload = build_workload(scenario(variant=variant, task="recall", channels=8, eval_size=64))
        workload.train(120)
        metrics = workload.evaluate()
        mse[variant], chance = metrics["test_mse"], metrics["test_mse_mean_frame"]
    assert mse["lif"] > 0.8 * chance  # LIF's 0.5 decay forgets the frame within eight steps
    assert mse["stc"] < 0.7 * mse["lif"]
    assert mse["if"] < 0.9 * mse["stc"]  # removing the leak is all the memory this task needs


@pytest.mark.parametrize("workload, data, field", [
    ({"variant": "glif"}, {}, "workload.variant"),
    ({"frames_in": 10}, {}, "workload.frames_in"),
    ({"frames_in": -1}, {}, "workload.frames_in"),
    ({"channels": 6, "groups": 4}, {}, "workload.groups"),
    ({"channels": 16, "gate_groups": 3}, {}, "workload.gate_groups"),
    ({"gate_groups": 0}, {}, "workload.gate_groups"),
    ({"task": "classify"}, {}, "workload.task"),
    ({}, {"dataset": "digits"}, "workload.name"),
])
def test_bad_config_values_are_refused_with_the_field_named(workload, data, field):
    raw = {"name": "t", "kind": "workload", "data": {"dataset": "moving_digits", **data},
           "workload": {"name": "stc", **workload}}
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        validate_raw(raw, "s.yaml")


FEDERATED = {
    "name": "stc-fed-tiny", "kind": "federated", "seed": 3,
    "engine": {"type": "local", "num_cpus": 1},
    # 10% of the sequences for training, split by digit: each client sees different digits
    "data": {"dataset": "moving_digits", "test_fraction": 0.9, "num_clients": 2,
             "partition": {"type": "shards", "classes_per_client": 5}},
    "workload": {"name": "stc", "variant": "stc", "channels": 4, "batch_size": 16, "lr": 0.01},
    "federated": {"rounds": 3, "local_epochs": 2, "proximal_mu": 0.0, "strategy": {"name": "fedavg"}},
    "report": {"kind": "training"},
}


@pytest.mark.integration
def test_stc_trains_as_a_federated_client_workload_under_fedavg(tmp_path):
    """Catches clients that do not train or a server that does not average what they learnt: the final global
    model must beat the all-black predictor (MSE 0.0587 on these frames), which an untrained or barely trained
    one does not (2 rounds of 1 epoch at lr 3e-3 gave 0.0589). Calibrated on seeds 3-5: final MSE 0.0511 /
    0.0534 / 0.0506, i.e. 0.86-0.91 of all-black."""
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump(FEDERATED))
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(tmp_path / "run"),
                           "--quiet"], env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rounds = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["clients_trained"] == 2 and r["clients_failed"] == 0 for r in rounds)
    assert all(0 < r["test_ssim"] <= 1 for r in rounds)
    future = DATASETS["moving_digits"]().x[:, 5:]  # after the 5 input frames (frames_in's default)
    all_black = float((future.astype(np.float64) ** 2).mean())
    assert rounds[-1]["test_mse"] < 0.95 * all_black
    histograms = np.load(tmp_path / "run" / "artifacts.npz")["label_histograms"]
    assert ((histograms > 0).sum(1) == 5).all() and ((histograms > 0).sum(0) == 1).all()  # disjoint digits
