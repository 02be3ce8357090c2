"""The model families of ``pretrain.model.family``: which model, which data, which quality metric.

  causal_lm  `GPT` (decoder) on the packed corpus; quality: held-out next-token perplexity
  masked_lm  `GPT` with bidirectional attention on `MaskedLMData`; quality: held-out masked-token perplexity
  vit        `DigitsViT` on `DigitsData` (``data.test_fraction`` of the digits held out); quality: test accuracy

The training process (`testbed.pretrain.ds_worker`) asks this module for the three and is
otherwise the same loop for every family.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.evaluation import EVAL_BATCH, Forward, _placeholder, all_reduce_sum, heldout_perplexity
from testbed.pretrain.masked_lm import MaskedLMData
from testbed.pretrain.model import GPT, summed_loss
from testbed.pretrain.vit import DigitsData, DigitsViT
from testbed.scenario import Scenario


def open_training_data(run_dir: Path, scenario: Scenario) -> TrainingData | DigitsData:
    """The family's data: the prepared corpus folder, masked for masked_lm, or the digits."""
    config = scenario.pretrain or PretrainConfig()
    if config.model.family == "vit":
        return DigitsData(scenario.data.test_fraction, scenario.seed, config.model.patch_size)
    if config.model.family == "masked_lm":
        return MaskedLMData(run_dir / "corpus", scenario.seed)
    return TrainingData(run_dir / "corpus", scenario.seed)


def build_model(config: PretrainConfig, data) -> nn.Module:
    """A freshly initialised model of the configured family for this data."""
    if config.model.family == "vit":
        return DigitsViT(config.model, data.num_classes)
    vocab = data.model_vocab_size if isinstance(data, MaskedLMData) else data.manifest.vocab_size
    return GPT(config.model, vocab, config.context_length)


def placeholder_batch(data):
    """A batch that stands in for a process that has run out of evaluation batches."""
    return data.placeholder() if isinstance(data, DigitsData) else _placeholder(data.length, data.manifest.pad_id)


def quality_metrics(forward: Forward, data, rank: int, world: int, device: torch.device) -> dict[str, float]:
    """The family's held-out quality: perplexity (language models) or test accuracy and loss (vit)."""
    if not isinstance(data, DigitsData):
        return heldout_perplexity(forward, data, rank, world, device)
    return image_accuracy(forward, data, rank, world, device)


@torch.no_grad()
def image_accuracy(forward: Forward, data: DigitsData, rank: int, world: int, device: torch.device) -> dict[str, float]:
    """Test accuracy and mean cross-entropy over the held-out images, summed over processes."""
    correct, loss = 0.0, 0.0
    count: float = 0  # an int until the all-reduce returns floats
    for batch in data.eval_batches(rank, world, EVAL_BATCH):
        used = (batch or data.placeholder()).to(device)
        logits = forward(used.tokens, used.document_ids)
        if batch is not None:
            correct += float((logits[:, 0].argmax(dim=-1) == used.labels[:, 0]).sum())
            loss += float(summed_loss(logits, used.labels))
            count += len(used.labels)
    correct, loss, count = all_reduce_sum([correct, loss, count], device)
    return {"test_accuracy": correct / max(count, 1.0), "heldout_loss": loss / max(count, 1.0)}
