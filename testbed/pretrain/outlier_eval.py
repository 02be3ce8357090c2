"""The outlier and quantization evaluations of a ``pretrain.outliers`` run, done by every training process.

At each evaluation step: the paper's outlier metrics over the held-out batches (overall, FFN and
block outputs apart, and per hooked module, `testbed.pretrain.outliers`) and the attention sink per
layer (`testbed.pretrain.attention_sink`). After the last step also: the |activation|
histograms (sent to the driver as report arrays) and the quality of the W8A8-quantized model
(`testbed.pretrain.quantization`) beside the full-precision quality, and the gap between them
(perplexity increase for language models, accuracy drop for the ViT).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.evaluation import EVAL_BATCH
from testbed.pretrain.families import build_model, placeholder_batch, quality_metrics
from testbed.pretrain.outliers import HISTOGRAM_EDGES, OutlierMeter, measure_outliers
from testbed.pretrain.quantization import QuantizedModel


def outlier_metrics(model: nn.Module, data, rank: int, world: int, device: torch.device) -> tuple[dict, OutlierMeter]:
    """``avg_kurtosis``, ``max_inf_norm`` and the per-module ``outliers`` of the model now."""
    was_training = model.training
    model.eval()
    meter = measure_outliers(model, data.eval_batches(rank, world, EVAL_BATCH), placeholder_batch(data), device)
    model.train(was_training)
    return {**meter.summary(), "outliers": meter.per_module(), "sink": meter.sink.per_layer()}, meter


def histogram_arrays(meter: OutlierMeter) -> dict[str, list]:
    """The report arrays of the final |activation| histograms (JSON-ready lists)."""
    return {"outlier_modules": meter.names, "outlier_histogram_edges": HISTOGRAM_EDGES.tolist(),
            "outlier_histograms": [meter.histograms[n].tolist() for n in meter.names],
            "outlier_peaks": [meter.peaks[n] for n in meter.names]}


def quantized_metrics(model: nn.Module, config: PretrainConfig, data, full_precision: dict[str, float],
                      rank: int, world: int, device: torch.device) -> dict[str, float]:
    """Quality of the W8A8 model, prefixed ``w8a8_``, and ``quantization_gap``.

    The copy is rebuilt from the state dict (a DeepSpeed-wrapped module carries hooks that should
    not be copied). Every process calibrates on the same first training batches (the whole
    global batch of steps 0, 1, ...), so all processes use the same ranges.
    """
    assert config.outliers is not None  # called only with outlier metrics on
    fresh = build_model(config, data).to(device)
    fresh.load_state_dict(model.state_dict())
    options = config.outliers
    quantized = QuantizedModel(fresh, options.weight_bits, options.activation_bits, options.weight_range,
                               options.percentile if options.activation_range == "percentile" else None)
    calibration = (data.batch(data.global_batch(step, config.batch_size)).to(device)
                   for step in range(config.outliers.calibration_batches))
    quantized.calibrate((batch.tokens, batch.document_ids) for batch in calibration)
    quality = quality_metrics(quantized, data, rank, world, device)
    record = {f"w8a8_{key}": value for key, value in quality.items()}
    if "test_accuracy" in quality:
        record["quantization_gap"] = full_precision["test_accuracy"] - quality["test_accuracy"]
    else:
        record["quantization_gap"] = quality["heldout_ppl"] - full_precision["heldout_ppl"]
    return record


def as_report_arrays(lists: dict[str, list]) -> dict[str, np.ndarray]:
    """The driver's side of `histogram_arrays`."""
    return {key: np.asarray(value) for key, value in lists.items()}
