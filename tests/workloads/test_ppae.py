"""PPAE: the data, the attention control, DDIM inversion, the local blend, the metrics, resume, config errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.ppae import data, editing, metrics
from testbed.workloads.ppae.model import AttentionControl, Denoiser, alpha_bars
from testbed.workloads.ppae.workload import PPAEWorkload
from testbed.workloads.runner import build_workload

TINY = dict(train_clips=64, test_clips=8, hidden=16, heads=2, batch_size=16, sample_steps=4)
# The size of the core test: calibrated on seeds 0-2 (see `test_attention_localises_the_event_...`).
CORE = dict(train_clips=800, test_clips=32, sample_steps=25)
CORE_STEPS = 600


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "ppae", **workload}, "training": {"steps": 100}}, "s.yaml")


def test_clips_hold_their_captioned_events_at_the_recorded_frames():
    log_pow, captions, frames = data.make_events(40, np.random.default_rng(0))
    assert log_pow.shape == (40, data.FRAMES, data.BANDS) and captions.shape == (40, data.CAPTION)
    for caption, labels, power in zip(captions.tolist(), frames.tolist(), log_pow):
        assert caption[0] == data.BACKGROUND
        events = sorted(set(labels) - {-1})
        assert sorted(t - 1 for t in caption[1:] if t != data.PAD) == events
        loud, quiet = power[np.array(labels) >= 0].max(), power[np.array(labels) < 0].max()
        assert loud > quiet + 1.0  # every event stands above the background (ln power)


def test_attention_control_records_injects_and_reweights():
    model = Denoiser(16, 2, 2, 50)
    x, t, caption = torch.randn(3, 32, 32), torch.tensor([1, 10, 40]), torch.tensor([[0, 1, 5], [0, 2, 3], [0, 4, 5]])
    model.control = AttentionControl(record=True)
    plain = model(x, t, caption)
    maps = model.control.maps
    assert len(maps) == 2 and maps[0].shape == (3, 2, 32, 3)
    assert torch.allclose(maps[0].sum(-1), torch.ones(3, 2, 32))
    # injecting a pass's own maps changes nothing; injecting another caption's maps does
    model.control = AttentionControl(inject=maps)
    assert torch.allclose(model(x, t, caption), plain, atol=1e-6)
    other = torch.tensor([[0, 3, 5]] * 3)
    model.control = AttentionControl(record=True)
    model(x, t, other)
    model.control = AttentionControl(inject=model.control.maps)
    assert not torch.allclose(model(x, t, caption), plain)
    weight = torch.ones(3, 3)
    weight[:, 1] = 2.0
    model.control = AttentionControl(record=True, weight=weight)
    model(x, t, caption)
    assert torch.allclose(model.control.maps[0][..., 1], 2 * maps[0][..., 1], atol=1e-6)


def test_ddim_inversion_round_trips_with_the_exact_denoiser_of_a_point_mass():
    abar = alpha_bars(100)
    point = torch.linspace(-1, 1, 32).expand(2, 32, 32)

    class Exact(torch.nn.Module):
        """For data all at ``point``: eps = (x_t - sqrt(abar) point) / sqrt(1 - abar), exactly."""

        control = None

        def forward(self, x, t, caption):
            a = abar[t][:, None, None]
            return (x - a.sqrt() * point) / (1 - a).sqrt()

    timesteps = editing.ddim_timesteps(100, 10)
    assert timesteps[0] == 99 and timesteps[-1] == 0 and len(set(timesteps)) == 10
    latents, maps = editing.invert(Exact(), point, None, abar, timesteps)
    assert set(latents) == set(timesteps) and maps[99] == []
    back = editing.denoise(Exact(), latents[99], None, abar, timesteps)
    assert torch.allclose(back, point, atol=1e-4)
    assert torch.allclose(editing.denoise(Exact(), torch.randn(2, 32, 32), None, abar, timesteps), point, atol=1e-4)


def test_local_blend_copies_the_source_outside_the_mask():
    torch.manual_seed(0)
    model = Denoiser(16, 2, 1, 50)
    abar, timesteps = alpha_bars(50), editing.ddim_timesteps(50, 6)
    x0, caption = torch.randn(4, 32, 32), torch.tensor([[0, 1, 2]] * 4)
    target = torch.tensor([[0, 3, 2]] * 4)
    edited, mask = editing.ppae_edit(model, x0, caption, target, torch.ones(4, dtype=torch.long), abar, timesteps,
                                     inject_frac=0.4, global_frac=0.0, threshold=0.5)
    assert torch.equal(edited[mask == 0], x0[mask == 0])
    assert bool((mask.sum(1) >= 1).all())


def tiny_edit(**workload) -> tuple[PPAEWorkload, torch.Tensor, torch.Tensor]:
    """A tiny untrained PPAE workload with no global pass (the blend holds to the end): (workload, edited, mask)."""
    built = build_workload(scenario(**TINY, global_frac=0.0, **workload))
    assert isinstance(built, PPAEWorkload)
    built.train(2)
    edited, mask = built.edit("ppae", built.invert())
    return built, edited, mask


def test_blend_ablation_leaves_the_outside_to_the_denoiser():
    # threshold 1: the mask is the map's peak frame, dilated (an untrained map is nearly flat)
    built, blended, mask = tiny_edit(threshold=1.0)
    x0, outside = built.test_set.features, (mask == 0)[..., None].expand_as(built.test_set.features)
    assert bool(outside.any()) and torch.equal(blended[outside], x0[outside])
    _, unblended, same_mask = tiny_edit(threshold=1.0, blend=False)
    assert torch.equal(same_mask, mask)  # the mask it would have used, reported as before
    assert not torch.allclose(unblended[outside], x0[outside], atol=1e-3)  # no frame is copied any more


def test_oracle_mask_is_the_true_event_and_the_blend_keeps_everything_else():
    built, edited, mask = tiny_edit(mask="oracle")
    truth = built.edits["truth"]
    assert torch.equal(mask, truth)
    _, _, estimated = tiny_edit()
    assert not torch.equal(estimated, truth)  # the untrained model's attention mask is not the truth
    outside = (truth == 0)[..., None].expand_as(edited)
    assert torch.equal(edited[outside], built.test_set.features[outside])
    inside = ~outside
    assert not torch.allclose(edited[inside], built.test_set.features[inside], atol=1e-3)


def test_attention_mask_thresholds_and_dilates():
    column = torch.zeros(1, 1, 1, 10, 3)  # one step, one layer: [B, heads, frames, tokens]
    column[..., 4:6, 1] = 1.0
    column[..., 2, 1] = 0.4  # below half the maximum
    mask, relative = editing.attention_mask({0: [column[0]]}, torch.tensor([1]), 0.5, dilate=1)
    assert mask[0].tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]
    assert relative[0, 2] == pytest.approx(0.4)


def test_metrics_closed_forms():
    a, b = torch.tensor([[1, 1, 0, 0.0]]), torch.tensor([[0, 1, 1, 0.0]])
    assert metrics.iou(a, b).item() == pytest.approx(1 / 3)
    x = torch.zeros(1, 4, 8)
    y = x.clone()
    y[0, 1] = 0.1
    frames = torch.tensor([[0.0, 1, 0, 0]])
    assert metrics.lsd_db(y, x, frames, 2.0).item() == pytest.approx(10 / np.log(10) * 0.2)
    assert metrics.lsd_db(y, x, 1 - frames, 2.0).item() == 0.0


@pytest.mark.parametrize("field, value", [
    ("variant", "audit"), ("train_clips", -1), ("sample_steps", 500), ("batch_size", 5000), ("heads", 3),
    ("inject_frac", 1.5), ("global_frac", 1.0), ("threshold", 0), ("operation", "refine"), ("sdedit_strength", 0),
    ("blend", "sometimes"), ("mask", "truth"),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})


def test_reweighting_needs_the_attention_edit():
    with pytest.raises(ScenarioError, match=r"workload\.operation"):
        scenario(variant="sdedit", operation="reweight")


@pytest.mark.parametrize("settings, field", [
    (dict(variant="regenerate", blend=False), "blend"), (dict(variant="sdedit", mask="oracle"), "mask"),
    (dict(blend=False, mask="oracle"), "mask"),
])
def test_blend_ablations_need_the_blend(settings, field):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**settings)


def core_measurements(seed: int) -> dict[str, float]:
    """Train the core-test model and measure localisation and preservation for PPAE and regeneration."""
    workload = build_workload(scenario(seed, **CORE))
    assert isinstance(workload, PPAEWorkload)
    workload.train(CORE_STEPS)
    inverted = workload.invert()
    found = workload.localisation(inverted[1])
    x0, outside = workload.test_set.features, 1 - workload.edits["truth"]
    for variant in ("ppae", "regenerate"):
        edited, _ = workload.edit(variant, inverted)
        found[f"lsd_{variant}"] = float(metrics.lsd_db(edited, x0, outside, workload.log_scale).mean())
    return found


@pytest.mark.slow
def test_attention_localises_the_event_and_the_edit_preserves_the_rest():
    # Measured on seeds 0, 1, 2 at this size: IoU 0.75, 0.67, 0.58 (the other word's map: 0.18, 0.14,
    # 0.16); LSD outside the event, PPAE / regeneration: 1.74 / 4.05 = 0.43, 1.27 / 8.69 = 0.15,
    # 0.84 / 1.60 = 0.52. The thresholds are the claims, not loosened: seed 2 misses the
    # ratio at this size, which docs/reproduction/ppae.md records.
    found = core_measurements(0)
    assert found["mask_iou"] >= 0.5
    assert found["mask_iou_other_token"] < 0.35  # the map of another word does not find the event
    assert found["lsd_ppae"] <= 0.5 * found["lsd_regenerate"]
