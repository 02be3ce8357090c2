"""Tests for the post-LN BERT-style model (``model.norm: post``) and the BERT outlier protocol on it:
the block computes LN2(h + FFN(h)) with h = LN1(x + attention(x)), the hooks read the FFN output
(BERT's ``output.dense``) and LN2's output (``output.LayerNorm``), and W8A8 quantizes both residual
sums of a post-LN block."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from testbed.pretrain.attention import document_mask
from testbed.pretrain.batches import Batch
from testbed.pretrain.config import ModelConfig
from testbed.pretrain.model import GPT, Block, rotary_tables
from testbed.pretrain.outliers import hooked_modules, measure_outliers
from testbed.pretrain.quantization import QuantizedModel

VOCAB, WIDTH = 40, 32


def tiny_post_ln() -> GPT:
    """A 2-layer post-LN masked LM whose LayerNorm weights and biases are moved off (1, 0), so that
    a LayerNorm left out, swapped or applied to the wrong sum changes the numbers."""
    torch.manual_seed(0)
    config = ModelConfig(layers=2, d_model=WIDTH, heads=4, family="masked_lm", norm="post")
    model = GPT(config, vocab_size=VOCAB, context_length=24).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.add_(0.5 * torch.randn(module.weight.shape, generator=generator))
                module.bias.add_(0.5 * torch.randn(module.bias.shape, generator=generator))
    return model


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(2))
    return tokens, torch.tensor([[0] * 7 + [1] * 5, [0] * 9 + [-1] * 3])


def _layer_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    assert isinstance(norm, nn.LayerNorm)
    return F.layer_norm(x, (WIDTH,), norm.weight, norm.bias, norm.eps)


def forward_by_hand(model: GPT, tokens: torch.Tensor, document_ids: torch.Tensor):
    """BERT's layout written out: logits, and per layer the FFN output, the first residual sum
    and LN2's output."""
    rotary = rotary_tables(tokens.shape[1], model.head_dim)
    mask = document_mask(document_ids, causal=False).unsqueeze(1)
    x = _layer_norm(model.embedding.weight[tokens], model.embedding_norm)  # embeddings.LayerNorm
    layers = []
    for block in model.blocks:
        assert isinstance(block, Block)
        h = _layer_norm(x + block.attention(x, rotary, mask), block.attention_norm)  # attention.output.LayerNorm
        up, down = cast(nn.Linear, block.mlp[0]), cast(nn.Linear, block.mlp[2])
        ffn = F.linear(F.gelu(F.linear(h, up.weight, up.bias)), down.weight, down.bias)  # output.dense
        x = _layer_norm(h + ffn, block.mlp_norm)  # output.LayerNorm
        layers.append({"ffn": ffn, "sum": h + ffn, "output": x})
    return x @ model.embedding.weight.T, layers  # no final LayerNorm before the tied output


@torch.no_grad()
def test_post_ln_model_computes_bert_layout() -> None:
    model = tiny_post_ln()
    tokens, ids = _inputs()
    logits, _ = forward_by_hand(model, tokens, ids)
    torch.testing.assert_close(model(tokens, ids), logits, rtol=1e-5, atol=1e-5)
    # the pre-LN default is untouched: a final LayerNorm and no embedding LayerNorm
    pre = GPT(ModelConfig(layers=2, d_model=WIDTH, heads=4, family="masked_lm"), VOCAB, 24)
    assert isinstance(pre.final_norm, nn.LayerNorm) and isinstance(pre.embedding_norm, nn.Identity)


@torch.no_grad()
def test_bert_hooks_read_ffn_output_and_second_layernorm_output() -> None:
    model = tiny_post_ln()
    tokens, ids = _inputs()
    _, layers = forward_by_hand(model, tokens, ids)
    seen: dict[str, torch.Tensor] = {}
    handles = [module.register_forward_hook(lambda _m, _i, out, name=name: seen.setdefault(name, out))
               for name, module in hooked_modules(model).items()]
    model(tokens, ids)
    for handle in handles:
        handle.remove()
    assert list(seen) == ["layer0.ffn_out", "layer0.output", "layer1.ffn_out", "layer1.output"]
    for j, layer in enumerate(layers):
        torch.testing.assert_close(seen[f"layer{j}.ffn_out"], layer["ffn"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(seen[f"layer{j}.output"], layer["output"], rtol=1e-5, atol=1e-5)
    # the BERT protocol's headline numbers are over those two tensors per layer and nothing else
    meter = measure_outliers(model, [Batch(tokens, ids, ids)], Batch(tokens[:1], ids[:1], ids[:1]),
                             torch.device("cpu"))
    stats, summary = meter.per_module(), meter.summary()
    assert summary["avg_kurtosis"] == pytest.approx(np.mean([s["kurtosis"] for s in stats.values()]))
    assert summary["block_kurtosis"] == pytest.approx(np.mean([stats[f"layer{j}.output"]["kurtosis"] for j in (0, 1)]))
    assert summary["max_inf_norm"] == pytest.approx(max(summary["ffn_inf_norm"], summary["block_inf_norm"]))


@torch.no_grad()
def test_w8a8_quantizes_both_residual_sums_of_a_post_ln_block() -> None:
    tokens, ids = _inputs()
    quantized = QuantizedModel(tiny_post_ln()).calibrate([(tokens, ids)])  # one batch: the range is its min-max
    with_8_bit_weights = tiny_post_ln()
    with_8_bit_weights.load_state_dict(quantized.model.state_dict())
    _, layers = forward_by_hand(with_8_bit_weights, tokens, ids)
    block = {name.removeprefix("blocks.0.") for name in quantized.quantizers if name.startswith("blocks.0.")}
    assert block == {"attention.qkv", "attention.out", "attention.weights", "attention_residual", "attention_norm",
                     "mlp.0", "mlp.1", "mlp.2", "mlp_residual", "mlp_norm"}
    assert {"embedding", "embedding_norm"} <= set(quantized.quantizers) and "blocks.0" not in quantized.quantizers
    second_sum = quantized.quantizers["blocks.1.mlp_residual"]  # x + FFN(x), LN2's input
    assert (second_sum.low, second_sum.high) == pytest.approx(
        (float(layers[1]["sum"].min()), float(layers[1]["sum"].max())), rel=1e-5)


def test_post_norm_is_refused_for_the_vit_in_one_line(cli) -> None:
    code, _, err = cli("validate", "scenarios/pretrain/outeffhop-vit.yaml", "--set", "pretrain.model.norm=post")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "norm 'post' is for the language models" in err


@pytest.mark.integration
def test_post_ln_masked_lm_run_records_the_bert_hook_set(cli, tmp_path: Path) -> None:
    scenario = yaml.safe_load(Path("scenarios/pretrain/outeffhop-bert-postln.yaml").read_text())
    scenario.pop("sweep")
    scenario.pop("claims")  # its arms are the sweep's variants
    scenario["pretrain"].update({"steps": 4, "eval_every": 2, "checkpoint_every": 4, "batch_size": 4,
                                 "eval_documents": 4, "tokenizer": {"vocab_size": 300, "train_documents": 40}})
    scenario["pretrain"]["corpus"]["max_documents"] = 60
    scenario["pretrain"]["model"].update({"d_model": 16, "heads": 2})
    scenario["pretrain"]["outliers"]["calibration_batches"] = 1
    path = tmp_path / "postln.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    assert set(records[-1]["outliers"]) == {f"layer{j}.{role}" for j in (0, 1) for role in ("ffn_out", "output")}
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert {"block_kurtosis", "block_inf_norm", "ffn_kurtosis", "ffn_inf_norm", "quantization_gap"} <= set(final)
    assert (tmp_path / "run" / "report" / "activation-histograms.png").is_file()
