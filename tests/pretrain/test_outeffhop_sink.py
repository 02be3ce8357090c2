"""Tests for the attention-sink setting of OutEffHop: the Bigram-Backcopy task, BOS at the start of
every document, the sink metrics, the FFN/block outlier summaries and the OPT quantizer's ranges."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pydantic
import pytest
import torch
import yaml

from testbed.pretrain.attention import Normalizer, softmax_1
from testbed.pretrain.attention_sink import SinkMeter, document_starts
from testbed.pretrain.batches import Batch, TrainingData
from testbed.pretrain.config import BigramBackcopyConfig, PretrainConfig
from testbed.pretrain.masked_lm import MaskedLMData
from testbed.pretrain.model import IGNORE_INDEX, SelfAttention
from testbed.pretrain.outliers import OutlierMeter, measure_outliers
from testbed.pretrain.prepare import CorpusManifest, PackedSequences, prepare_corpus
from testbed.pretrain.quantization import ActivationQuantizer, percentile_range, quantize_weight
from testbed.pretrain.sink_task import BigramBackcopy
from testbed.pretrain.token_store import TokenStore
from tests.pretrain.test_outeffhop import tiny_lm
from tests.pretrain.test_pretrain_data import write_folder_corpus


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- the Bigram-Backcopy task -----------------------------------------------------------------

def test_backcopy_documents_start_with_bos_and_copy_after_every_trigger() -> None:
    task = BigramBackcopy.draw(BigramBackcopyConfig(symbols=16, triggers=3), np.random.default_rng(0))
    documents = task.documents(200, 32, np.random.default_rng(1))
    assert (documents[:, 0] == task.bos_id).all() and (documents[:, 1:] < task.symbols).all()
    after_trigger = np.isin(documents[:, 1:-1], task.triggers)
    assert after_trigger.sum() > 100  # the rule is exercised
    np.testing.assert_array_equal(documents[:, 2:][after_trigger], documents[:, :-2][after_trigger])
    # elsewhere the next symbol follows the bigram rows: never a transition of probability ~0
    current, following = documents[:, 1:-1][~after_trigger], documents[:, 2:][~after_trigger]
    assert task.transitions[current, following].min() > 1e-12
    assert not np.isin(documents[:, 1], task.triggers).any()


def test_backcopy_config_rejects_unknown_keys_and_all_trigger_alphabets() -> None:
    with pytest.raises(pydantic.ValidationError, match="symbol"):
        PretrainConfig.model_validate({"corpus": {"source": "bigram_backcopy", "bigram_backcopy": {"symbol": 8}}})
    with pytest.raises(pydantic.ValidationError, match="fewer than symbols"):
        BigramBackcopyConfig(symbols=4, triggers=4)


def test_backcopy_corpus_puts_bos_at_position_0_of_every_sequence(tmp_path: Path) -> None:
    config = PretrainConfig.model_validate({
        "corpus": {"source": "bigram_backcopy", "heldout_fraction": 0.1,
                   "bigram_backcopy": {"symbols": 16, "documents": 300}},
        "context_length": 16, "eval_documents": 8})
    prepare_corpus(tmp_path / "corpus", config, seed=3)
    manifest = CorpusManifest.load(tmp_path / "corpus")
    assert manifest.bos_id == 16 and manifest.vocab_size == 19
    assert manifest.n_train_documents + manifest.n_heldout_documents == 300
    data = TrainingData(tmp_path / "corpus", seed=3)
    batch = data.batch(data.global_batch(0, 20))
    assert (batch.tokens[:, 0] == manifest.bos_id).all() and (batch.document_ids >= 0).all()  # no padding
    for held_out in data.eval_batches(0, 1, 4):
        assert held_out is not None and (held_out.tokens[:, 0] == manifest.bos_id).all()


@pytest.mark.parametrize("fraction", [0.01, 0.99])
def test_backcopy_split_keeps_a_document_on_each_side(tmp_path: Path, fraction: float) -> None:
    config = PretrainConfig.model_validate({
        "corpus": {"source": "bigram_backcopy", "heldout_fraction": fraction,
                   "bigram_backcopy": {"symbols": 8, "documents": 3}},
        "context_length": 8, "eval_documents": 2})
    prepare_corpus(tmp_path / "corpus", config, seed=0)
    manifest = CorpusManifest.load(tmp_path / "corpus")
    assert manifest.n_train_documents >= 1 and manifest.n_heldout_documents >= 1


def test_corpus_bos_starts_every_document_and_every_packed_document_start(tmp_path: Path) -> None:
    config = PretrainConfig.model_validate({
        "corpus": {"source": "folder", "path": str(write_folder_corpus(tmp_path / "texts")), "max_documents": None,
                   "heldout_fraction": 0.2, "bos": True},
        "tokenizer": {"vocab_size": 300}, "context_length": 64, "eval_documents": 5})
    folder = tmp_path / "corpus"
    prepare_corpus(folder, config, seed=0)
    manifest = CorpusManifest.load(folder)
    assert manifest.bos_id is not None
    train = TokenStore(folder / "train", manifest.vocab_size)
    assert all(train[i][0] == manifest.bos_id and train[i][-1] == manifest.eos_id for i in range(len(train)))
    assert all((train[i][1:] != manifest.bos_id).all() for i in range(len(train)))  # BOS only at the start
    packed = PackedSequences.load(folder / "train")
    for i in range(len(packed)):
        for doc, start, _ in packed[i]:
            assert (train[doc][start] == manifest.bos_id) == (start == 0)
    without = PretrainConfig.model_validate({**config.model_dump(), "corpus": {**config.corpus.model_dump(),
                                                                              "bos": False}})
    prepare_corpus(tmp_path / "plain", without, seed=0)
    assert CorpusManifest.load(tmp_path / "plain").bos_id is None


def test_masked_lm_with_bos_never_masks_cls_or_sep_and_counts_its_labels(tmp_path: Path) -> None:
    config = PretrainConfig.model_validate({
        "corpus": {"source": "folder", "path": str(write_folder_corpus(tmp_path / "texts")), "max_documents": None,
                   "heldout_fraction": 0.2, "bos": True},
        "tokenizer": {"vocab_size": 300}, "context_length": 64, "eval_documents": 5,
        "model": {"family": "masked_lm"}})
    prepare_corpus(tmp_path / "corpus", config, seed=0)
    data = MaskedLMData(tmp_path / "corpus", seed=0)
    manifest = data.manifest
    assert data.special_ids == (manifest.bos_id, manifest.eos_id)
    for step in range(3):
        indices = data.global_batch(step, 8)
        batch, plain = data.batch(indices), TrainingData.batch(data, indices)
        special = (plain.tokens == manifest.bos_id) | (plain.tokens == manifest.eos_id)
        assert special.any() and (batch.labels[special] == IGNORE_INDEX).all()
        assert (batch.tokens[special] == plain.tokens[special]).all()  # [CLS] and [SEP] stay as they are
        assert int((batch.labels != IGNORE_INDEX).sum()) == data.label_count(indices)


# --- sink metrics ------------------------------------------------------------------------------

def test_document_starts_of_a_packed_row_with_padding() -> None:
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, -1, -1]])
    assert document_starts(ids).tolist() == [[0, 0, 0, 3, 3, 5, -1, -1]]


def test_sink_mass_is_the_attention_weight_on_each_documents_first_token() -> None:
    weights = torch.rand(2, 3, 6, 6, generator=_generator(0)).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    one_document = torch.zeros(2, 6, dtype=torch.long)
    meter = SinkMeter(1)
    meter.add_weights(0, weights, one_document)
    # queries 1..5 (position 0 can only attend to itself), mean over heads and queries
    assert meter.per_layer()["layer0"]["mass"] == pytest.approx(float(weights[:, :, 1:, 0].mean()))
    packed = torch.tensor([[0, 0, 0, 1, 1, -1]] * 2)
    meter = SinkMeter(1)
    meter.add_weights(0, weights, packed)
    expected = torch.cat([weights[:, :, 1:3, 0], weights[:, :, 4:5, 3]], dim=-1).mean()
    assert meter.per_layer()["layer0"]["mass"] == pytest.approx(float(expected))


def test_softmax_1_lets_a_head_put_almost_no_mass_on_the_sink() -> None:
    scores = torch.full((1, 1, 8, 8), -12.0)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    ids = torch.zeros(1, 8, dtype=torch.long)
    masses = {}
    normalizers: dict[str, Normalizer] = {"softmax": torch.softmax, "softmax_1": softmax_1}
    for name, normalizer in normalizers.items():
        meter = SinkMeter(1)
        meter.add_weights(0, normalizer(scores.masked_fill(~causal, float("-inf")), dim=-1), ids)
        masses[name] = meter.per_layer()["layer0"]["mass"]
    assert masses["softmax_1"] < 1e-4  # a head that attends to nothing
    assert masses["softmax"] == pytest.approx(float(np.mean([1 / (q + 1) for q in range(1, 8)])))


def test_sink_norm_reads_the_residual_at_first_positions_apart_from_the_others() -> None:
    output = torch.ones(1, 4, 2)
    output[0, 0] = torch.tensor([30.0, 40.0])
    meter = SinkMeter(1)
    meter.add_residual(0, output, torch.zeros(1, 4, dtype=torch.long))
    stats = meter.per_layer()["layer0"]
    assert stats["sink_norm"] == pytest.approx(50.0) and stats["other_norm"] == pytest.approx(2**0.5)


def test_measurement_records_sink_and_ffn_and_block_outputs_apart_and_restores_the_fused_path() -> None:
    model = tiny_lm("softmax_1")
    tokens = torch.randint(0, 40, (2, 12), generator=_generator(1))
    doc_ids = torch.tensor([[0] * 12, [0] * 6 + [-1] * 6])
    meter = measure_outliers(model, [Batch(tokens, doc_ids, doc_ids)], Batch(tokens[:1], doc_ids[:1], doc_ids[:1]),
                             torch.device("cpu"))
    stats, summary = meter.per_module(), meter.summary()
    assert summary["block_kurtosis"] == pytest.approx(np.mean([stats[f"layer{j}.output"]["kurtosis"] for j in (0, 1)]))
    assert summary["ffn_inf_norm"] == pytest.approx(max(stats[f"layer{j}.ffn_out"]["inf_norm"] for j in (0, 1)))
    assert summary["block_kurtosis"] != pytest.approx(summary["ffn_kurtosis"])
    assert set(meter.sink.per_layer()) == {"layer0", "layer1"} and 0 < summary["sink_mass"] < 1
    assert meter.sink.sums[0, 1] == 11 + 5  # counted queries: all but each document's first
    assert all(module.fused for module in model.modules() if isinstance(module, SelfAttention))


def test_role_summaries_are_left_out_for_modules_without_layers() -> None:
    meter = OutlierMeter(["bulk"])
    meter.add("bulk", torch.randn(1, 2, 8, generator=_generator(2)), torch.ones(1, 2, dtype=torch.bool))
    assert set(meter.summary()) == {"avg_kurtosis", "max_inf_norm"}


@pytest.mark.integration
def test_sink_scenario_run_records_sink_and_per_layer_outliers_over_training(cli, tmp_path: Path) -> None:
    scenario = yaml.safe_load(Path("scenarios/pretrain/outeffhop-sink.yaml").read_text())
    scenario.pop("sweep")
    scenario.pop("claims")  # its arms are the sweep's variants
    scenario["pretrain"].update({"steps": 4, "eval_every": 2, "checkpoint_every": 4, "batch_size": 8,
                                 "eval_documents": 8})
    scenario["pretrain"]["corpus"]["bigram_backcopy"]["documents"] = 400
    scenario["pretrain"]["corpus"]["heldout_fraction"] = 0.05
    scenario["pretrain"]["outliers"]["calibration_batches"] = 1
    path = tmp_path / "sink.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    for record in records:
        assert set(record["sink"]) == {"layer0", "layer1"}
        assert record["sink_mass"] == max(s["mass"] for s in record["sink"].values())
        assert record["block_kurtosis"] == pytest.approx(
            np.mean([record["outliers"][f"layer{j}.output"]["kurtosis"] for j in (0, 1)]))
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert {"block_kurtosis", "ffn_inf_norm", "sink_mass", "quantization_gap"} <= set(final)
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "Outliers and the attention sink per layer, over training" in page
    assert (tmp_path / "run" / "report" / "outlier-layer-curves.png").is_file()


# --- the OPT quantizer's ranges ---------------------------------------------------------------

def test_mse_weight_range_clips_a_heavy_tail_and_lowers_the_rounding_error() -> None:
    w = torch.randn(64, 64, generator=_generator(3))
    w[0, 0] = 60.0  # one outlier stretches the min-max grid
    minmax, mse = quantize_weight(w, 4), quantize_weight(w, 4, "mse")
    assert float((mse - w).pow(2).sum()) < 0.9 * float((minmax - w).pow(2).sum())
    assert float(mse.abs().max()) < 30.0  # the range was clipped
    plain = torch.randn(16, 16, generator=_generator(5))  # min-max is one of the candidates: never worse
    assert float((quantize_weight(plain, 8, "mse") - plain).pow(2).sum()) <= \
        float((quantize_weight(plain, 8) - plain).pow(2).sum())


def test_percentile_activation_range_ignores_a_single_outlier_that_running_minmax_keeps() -> None:
    x = torch.randn(1, 400_000, generator=_generator(4))
    x[0, 7] = 1000.0
    low, high = percentile_range(x, 99.999)
    assert high < 10 and low > -10
    assert percentile_range(x, 99.999)[1] == pytest.approx(float(x.flatten().kthvalue(round(0.99999 * x.numel()))
                                                                  .values))
    by_minmax, by_percentile = ActivationQuantizer(8), ActivationQuantizer(8, 99.999)
    for quantizer in (by_minmax, by_percentile):
        quantizer.observe(x)
    assert by_minmax.high == 1000.0 and by_percentile.high == pytest.approx(high)
