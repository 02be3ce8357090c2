"""Workload ``softmax_regression``: a linear classifier trained by SGD on the scenario's ``data:`` block."""

from __future__ import annotations

import torch
from pydantic import Field

from testbed.config import StrictModel
from testbed.data import load_selected, train_test_split
from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload


class SoftmaxRegressionConfig(StrictModel):
    """The keys of ``workload:`` besides ``name``."""

    lr: float = Field(0.5, gt=0)
    batch_size: int = Field(32, gt=0)


class SoftmaxRegression(Workload):
    """Multinomial logistic regression: one linear layer, cross-entropy, plain SGD."""

    name = "softmax_regression"
    Config = SoftmaxRegressionConfig
    config: SoftmaxRegressionConfig
    summary = "example plugin: a linear softmax classifier on any data block"
    headline_metric = ("test_accuracy", "max")
    checkpointed = ("model", "optimizer", "batches")  # all a resume needs to continue bit for bit

    def __init__(self, config: SoftmaxRegressionConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        train, test = train_test_split(load_selected(data), data.test_fraction, seeds.integer("data.split"))
        self.x, self.y = torch.as_tensor(train.x).float().flatten(1), torch.as_tensor(train.y)
        self.test_x, self.test_y = torch.as_tensor(test.x).float().flatten(1), torch.as_tensor(test.y)
        self.num_classes = train.num_classes
        torch.manual_seed(seeds.integer("model.init"))  # every random stream derives from the scenario's seed
        self.model = self.build_model()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)
        self.batches = seeds.torch("data.batches")

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Linear(self.x.shape[1], self.num_classes)

    def train(self, steps: int) -> dict[str, float]:
        losses = []
        for _ in range(steps):
            batch = torch.randint(len(self.y), (self.config.batch_size,), generator=self.batches)
            loss = torch.nn.functional.cross_entropy(self.model(self.x[batch]), self.y[batch])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return {"train_loss": sum(losses) / len(losses)}

    def evaluate(self) -> dict[str, float]:
        with torch.no_grad():
            logits = self.model(self.test_x)
        return {"test_loss": torch.nn.functional.cross_entropy(logits, self.test_y).item(),
                "test_accuracy": (logits.argmax(1) == self.test_y).float().mean().item()}
