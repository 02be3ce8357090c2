"""Tests for OutEffHop: attention variants, Hopfield layers, outlier metrics, W8A8 quantization,
the BERT/OPT/ViT model families and an end-to-end run that records all of it.

(Softmax_1's definition, its "attend to nothing" property, gradcheck and Hopfield fixed points
are in test_softmax1.py.)"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch
import yaml

from testbed.pretrain.attention import attention, document_mask, hopfield_retrieve, no_op_key_attention
from testbed.pretrain.batches import Batch
from testbed.pretrain.config import ModelConfig
from testbed.pretrain.hopfield import HopfieldLayer, HopfieldPooling
from testbed.pretrain.masked_lm import mask_tokens, masked_count
from testbed.pretrain.model import GPT, IGNORE_INDEX, SelfAttention, rotary_tables
from testbed.pretrain.outliers import OutlierMeter, kurtosis, measure_outliers
from testbed.pretrain.quantization import ActivationQuantizer, QuantizedModel, quantize_weight
from testbed.pretrain.vit import DigitsData, DigitsViT

VARIANTS = ("softmax", "softmax_1", "clipped_softmax", "gated", "clipped_softmax_1", "gated_softmax_1")


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def tiny_lm(attention_variant: str = "softmax", family: str = "causal_lm", seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = ModelConfig(layers=2, d_model=32, heads=4, family=family, attention=attention_variant)
    return GPT(config, vocab_size=40, context_length=24).eval()


# --- attention variants -----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
def test_no_op_key_through_fused_attention_equals_explicit_softmax_1_attention(causal: bool) -> None:
    g = _generator(0)
    q, k, v = (torch.randn(2, 3, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask = document_mask(torch.tensor([[0, 0, 0, 1, 1, 1, -1]] * 2), causal=causal).unsqueeze(1)
    torch.testing.assert_close(no_op_key_attention(q, k, v, mask), attention(q, k, v, mask, kind="softmax_1"))
    plain = torch.ones(7, 7, dtype=torch.bool).tril() if causal else None
    torch.testing.assert_close(no_op_key_attention(q, k, v, causal=causal), attention(q, k, v, plain, kind="softmax_1"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_and_explicit_attention_paths_give_the_same_outputs(variant: str) -> None:
    # The W8A8 evaluation switches every layer to the explicit path; it must compute the same function.
    model = tiny_lm(variant)
    tokens = torch.randint(0, 40, (2, 12), generator=_generator(1))
    doc_ids = torch.tensor([[0] * 7 + [1] * 5, [0] * 10 + [-1] * 2])
    with torch.no_grad():
        fused = model(tokens, doc_ids)
        for module in model.modules():
            if isinstance(module, SelfAttention):
                module.fused = False
        explicit = model(tokens, doc_ids)
    torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-5)


def test_gated_attention_starts_as_the_ungated_output_times_the_initial_gate() -> None:
    gated = SelfAttention(16, 2, ModelConfig(d_model=16, heads=2, attention="gated", gate_init=0.25))
    plain = SelfAttention(16, 2, ModelConfig(d_model=16, heads=2))
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate")})
    x = torch.randn(1, 5, 16, generator=_generator(2))
    rotary = rotary_tables(5, 8)
    with torch.no_grad():
        # Every gate is sigmoid(logit(0.25)) = 0.25 at first: out(0.25 y) = 0.25 (out(y) - b) + b.
        bias = plain.out.bias
        torch.testing.assert_close(gated(x, rotary, None), 0.25 * (plain(x, rotary, None) - bias) + bias)


def test_clipped_softmax_attention_gives_exact_zero_weights() -> None:
    layer = SelfAttention(16, 1, ModelConfig(d_model=16, heads=1, attention="clipped_softmax", clip_gamma=-0.1))
    seen = []
    layer.weights.register_forward_hook(lambda _m, _i, out: seen.append(out))
    layer(torch.randn(1, 9, 16, generator=_generator(3)), rotary_tables(9, 16), None)
    weights = seen[0]
    causal_future = ~torch.ones(9, 9, dtype=torch.bool).tril()
    assert (weights[..., causal_future] == 0).all()
    assert (weights[..., ~causal_future] == 0).any()  # clipping, not only the mask, makes zeros


def test_masked_lm_attends_both_ways_and_the_causal_lm_only_backwards() -> None:
    tokens = torch.randint(0, 40, (1, 10), generator=_generator(4))
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 40
    doc_ids = torch.zeros_like(tokens)
    with torch.no_grad():
        for family, early_changes in (("causal_lm", False), ("masked_lm", True)):
            model = tiny_lm(family=family)
            diff = (model(tokens, doc_ids) - model(changed, doc_ids))[0, :-1].abs().max()
            assert (diff > 1e-6) == early_changes, family


# --- Hopfield layers ---------------------------------------------------------------------------

def _identity_hopfield(d: int, beta: float, normalizer: str = "softmax_1") -> HopfieldLayer:
    layer = HopfieldLayer(d, heads=1, normalizer=normalizer, beta=beta).double()
    with torch.no_grad():
        for linear in (layer.query, layer.key, layer.value, layer.out):
            linear.weight.copy_(torch.eye(d, dtype=torch.float64))
    return layer


def test_hopfield_layer_with_identity_projections_is_one_retrieval_step() -> None:
    patterns = torch.randn(6, 16, generator=_generator(5), dtype=torch.float64)
    patterns /= patterns.norm(dim=-1, keepdim=True)
    states = torch.randn(3, 16, generator=_generator(6), dtype=torch.float64)
    layer = _identity_hopfield(16, beta=5.0)
    retrieved = layer(states[None], patterns[None])[0]
    torch.testing.assert_close(retrieved, hopfield_retrieve(states, patterns, beta=5.0))


def test_hopfield_layer_iterated_reaches_the_stored_pattern_and_stays() -> None:
    patterns = torch.randn(8, 64, generator=_generator(7), dtype=torch.float64)
    patterns /= patterns.norm(dim=-1, keepdim=True)
    layer = _identity_hopfield(64, beta=60.0)
    state = (patterns[2] + 0.2 * torch.randn(64, generator=_generator(8), dtype=torch.float64) / 8)[None, None]
    for _ in range(3):
        state = layer(state, patterns[None])
    torch.testing.assert_close(state[0, 0], patterns[2], rtol=0, atol=1e-9)
    torch.testing.assert_close(layer(state, patterns[None]), state, rtol=0, atol=1e-12)


def test_hopfield_pooling_maps_any_set_size_to_fixed_outputs_regardless_of_order() -> None:
    torch.manual_seed(0)
    pooling = HopfieldPooling(16, heads=2, queries=3)
    items = torch.randn(2, 9, 16, generator=_generator(9))
    pooled = pooling(items)
    shuffled = pooling(items[:, torch.randperm(9, generator=_generator(10))])
    assert pooled.shape == (2, 3, 16) and pooling(items[:, :4]).shape == (2, 3, 16)
    torch.testing.assert_close(pooled, shuffled)


# --- outlier metrics ---------------------------------------------------------------------------

def test_kurtosis_matches_scipy_with_the_papers_unbiased_std() -> None:
    x = torch.randn(4, 500, generator=_generator(11), dtype=torch.float64) ** 3
    n = x.shape[1]
    # The paper divides the biased 4th moment by the unbiased variance squared (plus 1e-6).
    expected = scipy.stats.kurtosis(x.numpy(), axis=1, fisher=False, bias=True) * ((n - 1) / n) ** 2
    np.testing.assert_allclose(kurtosis(x).numpy(), expected, rtol=1e-6)
    gaussian = kurtosis(torch.randn(1, 200_000, generator=_generator(12), dtype=torch.float64))
    assert float(gaussian) == pytest.approx(3.0, abs=0.05)


def test_one_outlier_raises_kurtosis_and_inf_norm() -> None:
    bulk = torch.randn(1, 2, 64, generator=_generator(13))
    spiked = bulk.clone()
    spiked[0, 1, 5] = 40.0
    meter = OutlierMeter(["bulk", "spiked"])
    valid = torch.ones(1, 2, dtype=torch.bool)
    meter.add("bulk", bulk, valid)
    meter.add("spiked", spiked, valid)
    stats = meter.per_module()
    assert stats["spiked"]["kurtosis"] > 10 * stats["bulk"]["kurtosis"]
    assert stats["spiked"]["inf_norm"] == pytest.approx(40.0)
    summary = meter.summary()
    assert summary["max_inf_norm"] == pytest.approx(40.0)
    assert summary["avg_kurtosis"] == pytest.approx((stats["bulk"]["kurtosis"] + stats["spiked"]["kurtosis"]) / 2)


def test_outlier_measurement_hooks_every_layer_and_ignores_padding() -> None:
    model = tiny_lm()
    tokens = torch.randint(0, 40, (2, 12), generator=_generator(14))
    doc_ids = torch.tensor([[0] * 12, [0] * 6 + [-1] * 6])
    changed_padding = tokens.clone()
    changed_padding[1, 6:] = 7
    placeholder = Batch(tokens[:1], doc_ids[:1], doc_ids[:1])
    device = torch.device("cpu")
    first = measure_outliers(model, [Batch(tokens, doc_ids, doc_ids)], placeholder, device)
    second = measure_outliers(model, [Batch(changed_padding, doc_ids, doc_ids)], placeholder, device)
    assert set(first.per_module()) == {f"layer{j}.{p}" for j in (0, 1) for p in
                                       ("attn_norm", "attn_out", "ffn_norm", "ffn_out", "output")} | {"final_norm"}
    for name, stats in first.per_module().items():
        assert stats == pytest.approx(second.per_module()[name]), name
    assert all(s[2] == 2 for s in first.sums.values())  # two samples per module


# --- W8A8 quantization -------------------------------------------------------------------------

def test_weight_quantization_is_symmetric_8_bit_with_half_a_step_of_error() -> None:
    """Catches a quantizer that does not quantize (the identity passed the old checks), uses another step than
    max|w| / 127 or is not symmetric: every value must sit on the grid k * step, k in -127..127, nearest to w."""
    w = torch.randn(64, 32, generator=_generator(15))
    q = quantize_weight(w, 8)
    step = float(w.abs().max()) / 127
    levels = q / step
    torch.testing.assert_close(levels, torch.round(levels), rtol=0, atol=1e-4)  # on the grid
    torch.testing.assert_close(torch.round(levels), torch.round(w / step), rtol=0, atol=0)  # the nearest level
    assert int(torch.round(levels).abs().max()) == 127 and float(q.abs().max()) == pytest.approx(float(w.abs().max()))
    assert (q - w).abs().max() <= step / 2 + 1e-6 and float((q - w).abs().max()) > step / 4  # it really rounds
    torch.testing.assert_close(quantize_weight(-w, 8), -q)  # symmetric: no zero point
    assert len(torch.unique(torch.round(quantize_weight(w, 4) / (float(w.abs().max()) / 7)))) <= 15  # 4 bits


def test_an_activation_outlier_costs_the_rest_of_the_tensor_its_precision() -> None:
    # Why outliers hurt W8A8: one large value stretches the per-tensor range, so every other
    # value is rounded to a much coarser grid.
    bulk = torch.randn(4096, generator=_generator(16))
    errors = {}
    for name, tensor in (("bulk", bulk), ("with outlier", torch.cat([bulk, torch.tensor([200.0])]))):
        quantizer = ActivationQuantizer(8)
        quantizer(tensor)
        quantizer.calibrating = False
        errors[name] = float((quantizer(tensor)[:4096] - bulk).abs().mean())
    assert errors["with outlier"] > 20 * errors["bulk"]


def test_w8a8_model_is_close_to_full_precision_and_4_bit_activations_are_worse() -> None:
    model = tiny_lm("softmax_1")
    tokens = torch.randint(0, 40, (4, 16), generator=_generator(17))
    doc_ids = torch.zeros_like(tokens)
    with torch.no_grad():
        reference = model(tokens, doc_ids)
        errors = {}
        for bits in (8, 4):
            quantized = QuantizedModel(model, weight_bits=8, activation_bits=bits).calibrate([(tokens, doc_ids)])
            errors[bits] = float((quantized(tokens, doc_ids) - reference).abs().mean())
    assert 0 < errors[8] < 0.05 * float(reference.abs().mean())
    assert errors[4] > 3 * errors[8]
    assert "blocks.0.attention.weights" in quantized.quantizers  # the softmax output is quantized too


# --- data of the families ----------------------------------------------------------------------

def test_masking_labels_only_chosen_document_positions_and_is_reproducible() -> None:
    tokens = torch.randint(0, 40, (2, 40), generator=_generator(18))
    doc_ids = torch.tensor([[0] * 40, [0] * 20 + [-1] * 20])
    batch = Batch(tokens, doc_ids, torch.full_like(tokens, IGNORE_INDEX))
    masked = mask_tokens(batch, [_generator(1), _generator(2)], mask_id=40, vocab_size=40)
    again = mask_tokens(batch, [_generator(1), _generator(2)], mask_id=40, vocab_size=40)
    labelled = masked.labels != IGNORE_INDEX
    assert labelled.sum(dim=1).tolist() == [masked_count(40), masked_count(20)] == [6, 3]
    assert not labelled[1, 20:].any()
    assert torch.equal(masked.labels[labelled], tokens[labelled])
    assert torch.equal(masked.tokens[~labelled], tokens[~labelled])
    assert torch.equal(masked.tokens, again.tokens)


def test_digits_vit_classifies_images_served_as_pixel_token_batches() -> None:
    data = DigitsData(test_fraction=0.25, seed=0, patch_size=2)
    batch = data.batch(data.global_batch(0, 8))
    assert batch.tokens.shape == (8, 64) and int(batch.tokens.max()) <= 16 and batch.labels.shape == (8, 1)
    torch.manual_seed(0)
    model = DigitsViT(ModelConfig(d_model=32, heads=2, family="vit", attention="softmax_1"), num_classes=10)
    assert model(batch.tokens, batch.document_ids).shape == (8, 1, 10)
    assert model.pool.retrieval.normalizer == "softmax_1"
    test_images = 0
    for b in data.eval_batches(0, 1, 100):
        assert b is not None  # one process: no round runs out of images
        test_images += len(b.labels)
    assert test_images + len(data.train_labels) == 1797 and math.isclose(test_images / 1797, 0.25, abs_tol=0.01)


# --- scenarios and an end-to-end run -----------------------------------------------------------

def test_family_options_that_do_not_fit_are_refused_in_one_line(cli) -> None:
    path = Path("scenarios/pretrain/outeffhop-bert.yaml")
    code, _, err = cli("validate", path, "--set", "pretrain.attention_mask=causal")
    assert code == 2 and "pretrain.attention_mask: 'causal' does not fit model.family 'masked_lm'" in err
    code, _, err = cli("validate", path, "--set", "pretrain.model.attention=softmax2")
    assert code == 2 and "pretrain.model.attention" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("validate", "scenarios/pretrain/outeffhop-vit.yaml", "--set", "data.dataset=wine")
    assert code == 2 and "data.dataset: model.family 'vit' trains on the bundled 'digits' images" in err


@pytest.mark.parametrize("family", ["bert", "bert-postln", "opt", "vit"])
def test_outeffhop_scenarios_validate_with_their_20_variants(cli, family: str) -> None:
    code, out, _ = cli("validate", f"scenarios/pretrain/outeffhop-{family}.yaml")
    assert code == 0 and "20 variants" in out  # 4 attention variants x 5 seeds


@pytest.mark.integration
def test_vit_run_records_outliers_w8a8_quality_and_histograms(cli, tmp_path: Path) -> None:
    scenario = yaml.safe_load(Path("scenarios/pretrain/outeffhop-vit.yaml").read_text())
    scenario.pop("sweep")
    scenario.pop("claims")  # its arms are the sweep's variants
    scenario["pretrain"].update({"steps": 4, "eval_every": 2, "checkpoint_every": 4, "batch_size": 8})
    scenario["pretrain"]["model"].update({"layers": 1, "d_model": 16, "heads": 2})
    path = tmp_path / "vit.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    final = records[-1]
    assert final["max_inf_norm"] == max(s["inf_norm"] for s in final["outliers"].values())
    assert 0 <= final["w8a8_test_accuracy"] <= 1
    assert final["quantization_gap"] == pytest.approx(final["test_accuracy"] - final["w8a8_test_accuracy"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "outliers" not in summary["final_metrics"] and "avg_kurtosis" in summary["final_metrics"]
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "Outliers and W8A8 quantization" in page and "Activation histograms per layer" in page
    assert (tmp_path / "run" / "report" / "activation-histograms.png").is_file()
