"""Units of the pretraining worker and the outlier pipeline: LR schedule, DeepSpeed config,
histogram arrays from the training processes to the report, and the report sections."""

from __future__ import annotations

import pytest
import torch

from testbed.pretrain.ds_worker import deepspeed_config, warmup_cosine
from testbed.pretrain.outlier_eval import as_report_arrays, histogram_arrays
from testbed.pretrain.outlier_report import ActivationHistogramSection, OutlierSummarySection
from testbed.pretrain.outliers import OutlierMeter
from testbed.report.render import RunData


def test_warmup_cosine_ramps_linearly_then_decays_to_a_tenth():
    factor = warmup_cosine(4, 20)
    assert [factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    decay = [factor(s) for s in range(4, 21)]
    assert decay[0] == pytest.approx(1.0) and decay[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(decay, decay[1:]))
    assert factor(100) == pytest.approx(0.1)  # past the end it stays at the floor


def test_deepspeed_config_splits_the_global_batch_without_accumulation():
    config = deepspeed_config(batch_size=8, world=2, grad_clip=1.0, zero_stage=1, bf16=False)
    assert config["train_batch_size"] == 8 and config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 1 and config["zero_optimization"] == {"stage": 1}


def measured_meter() -> OutlierMeter:
    meter = OutlierMeter(["layer0.attn", "layer0.mlp", "final_norm"])
    generator = torch.Generator().manual_seed(0)
    valid = torch.ones(2, 5, dtype=torch.bool)
    for name in meter.names:
        output = torch.randn(2, 5, 8, generator=generator)
        output[0, 0, 0] = 40.0 if name == "layer0.mlp" else output[0, 0, 0]  # one outlier
        meter.add(name, output, valid)
    return meter


def test_histogram_arrays_survive_the_trip_to_the_driver():
    meter = measured_meter()
    arrays = as_report_arrays(histogram_arrays(meter))
    assert list(arrays["outlier_modules"]) == meter.names
    assert arrays["outlier_histograms"].shape == (3, len(arrays["outlier_histogram_edges"]) - 1)
    assert arrays["outlier_histograms"].sum(axis=1).tolist() == [80.0, 80.0, 80.0]  # 2 samples x 5 x 8
    assert arrays["outlier_peaks"][1] == pytest.approx(40.0)


def run_data(tmp_path, metrics, artifacts) -> RunData:
    config = {"pretrain": {"model": {"family": "bert", "attention": "softmax1"}}}
    return RunData(tmp_path, config, metrics, None, artifacts)


def test_sections_say_not_measured_without_outlier_records(tmp_path):
    data = run_data(tmp_path, [{"step": 1, "heldout_ppl": 9.0}], {})
    assert OutlierSummarySection().render(data, tmp_path) == ""  # left out of the page
    assert ActivationHistogramSection().render(data, tmp_path) == ""


def test_sections_show_the_last_outlier_record_and_the_histograms(tmp_path):
    records = [{"step": s, "avg_kurtosis": k, "max_inf_norm": 5.0, "heldout_ppl": 9.0, "w8a8_heldout_ppl": 9.5,
                "quantization_gap": 0.5, "outliers": {"layer0.mlp": {"kurtosis": k, "inf_norm": 5.0}}}
               for s, k in ((10, 3.25), (20, 7.75))]
    data = run_data(tmp_path, records, as_report_arrays(histogram_arrays(measured_meter())))
    summary = OutlierSummarySection().render(data, tmp_path)
    assert "softmax1" in summary and "7.75" in summary and "3.25" not in summary.split("<h3>")[0]
    assert (tmp_path / "outlier-kurtosis.png").is_file()
    histograms = ActivationHistogramSection().render(data, tmp_path)
    assert "layer0.mlp" in histograms and (tmp_path / "activation-histograms.png").is_file()


def test_histogram_panels_run_by_depth_not_as_text(tmp_path, monkeypatch):
    import testbed.pretrain.outlier_report as outlier_report

    meter = OutlierMeter(["layer10.mlp", "layer2.mlp", "layer0.mlp", "final_norm"])
    valid = torch.ones(1, 3, dtype=torch.bool)
    for name in meter.names:
        meter.add(name, torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0)), valid)
    titles: list[str] = []
    monkeypatch.setattr(outlier_report, "figure_image",
                        lambda fig, *args: titles.extend(ax.get_title() for ax in fig.axes) or "")
    data = run_data(tmp_path, [], as_report_arrays(histogram_arrays(meter)))
    ActivationHistogramSection().render(data, tmp_path)
    assert titles == ["layer0", "layer2", "layer10", "final_norm"]
