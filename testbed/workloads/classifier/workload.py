"""Workload ``classifier``: supervised classification of a bundled dataset (digits by default).

The network and its training functions are in `testbed.workloads.classifier.model`; the workload
adds the train/test split, the checkpointed batch stream and the federated hooks. Subclasses
(``bisam``) change the optimiser through `optimizer_for`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from testbed.config import StrictModel
from testbed.data import Dataset, load_selected, train_test_split
from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import FederatedWorkload
from testbed.workloads.classifier.config import ClassifierConfig, check
from testbed.workloads.classifier.model import (
    BatchStream,
    build_classifier,
    confusion_matrix,
    evaluate_model,
    make_optimizer,
    train_epochs,
    train_steps,
)
from testbed.workloads.classifier.report import ConfusionSection


class ClassifierWorkload(FederatedWorkload):
    """Supervised classification of a bundled dataset (digits by default)."""

    name = "classifier"
    Config = ClassifierConfig
    config: ClassifierConfig
    check: Callable[..., None] = staticmethod(check)  # subclasses (bisam) check their own Config
    checkpointed: ClassVar[tuple[str, ...]] = ("model", "optimizer", "stream", "steps_done")
    headline_metric = ("test_accuracy", "max")
    report_sections = [ConfusionSection()]
    supports_cuda = True  # `model` functions move batches to the model's device

    def __init__(self, config: ClassifierConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        full = load_selected(data)
        self.train_set, self.test_set = train_test_split(full, data.test_fraction, seeds.integer("data.split"))
        torch.manual_seed(seeds.integer("model.init"))
        # The training split's shape: a table's categorical columns are one-hot encoded by the split.
        self.model = build_classifier(config, self.train_set)
        self.optimizer = self.optimizer_for(self.model, config)
        self.stream = BatchStream(len(self.train_set.y), min(config.batch_size, len(self.train_set.y)),
                                  seeds.torch("data.batches"))
        self.steps_done = 0

    @classmethod
    def optimizer_for(cls, model: nn.Module, config: ClassifierConfig) -> torch.optim.Optimizer:
        """The optimiser of central training (a federated client's local epochs use `make_optimizer`)."""
        return make_optimizer(model, config)

    def build_model(self) -> nn.Module:
        return build_classifier(self.config, self.train_set)

    @classmethod
    def model_for(cls, config: StrictModel, data: Dataset) -> nn.Module:
        assert isinstance(config, ClassifierConfig)  # the federated setup validates the workload's own Config
        return build_classifier(config, data)

    @classmethod
    def fit_client(cls, model: nn.Module, data: Dataset, config: StrictModel, epochs: int,
                   generator: torch.Generator, proximal_mu: float = 0.0) -> float:
        assert isinstance(config, ClassifierConfig)  # the federated setup validates the workload's own Config
        optimizer = make_optimizer(model, config)
        return train_epochs(model, optimizer, data, epochs, config.batch_size, generator, proximal_mu)

    @classmethod
    def evaluate_model(cls, model: nn.Module, data: Dataset) -> dict[str, float]:
        return {f"test_{k}": v for k, v in evaluate_model(model, data).items()}

    def train(self, steps: int) -> dict[str, float]:
        loss = train_steps(self.model, self.optimizer, self.train_set, self.stream, steps)
        self.steps_done += steps
        return {"train_loss": loss}

    def evaluate(self) -> dict[str, float]:
        return self.evaluate_model(self.model, self.test_set)

    def artifacts(self) -> dict[str, np.ndarray]:
        return {"confusion": confusion_matrix(self.model, self.test_set)}
