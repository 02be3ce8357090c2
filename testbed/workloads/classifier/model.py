"""The classifier's network and its training and evaluation functions.

``arch: cnn`` is a two-block convolutional network for image data (scikit-learn's 8x8 digits,
the 28x28 glyphs), with batch norm after each convolution unless ``norm: none``; ``arch: simple_cnn``
the BatchNorm-free "SimpleCNN" backbone of SDEA's code (two 5x5 convolutions with 6 and 16 filters,
each followed by 2x2 max pooling, then fully connected layers of 120, 84, 84 and 256 units: the
network of its digit and CIFAR experiments, for images of at least 16x16); ``arch: mlp`` a
one-hidden-layer network for any dataset; ``model: "package.module:Class"`` the user's own
`nn.Module` (`testbed.workloads.usermodel`). The functions are public so that federated clients
(and other workloads: `BatchStream`) train the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from testbed.data import Dataset
from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.training import model_device, optimizer_step


def build_classifier(config: ClassifierConfig, data: Dataset) -> nn.Module:
    """The network for ``data``; parameters are drawn from torch's global RNG (seed it first)."""
    if config.model is not None:
        from testbed.workloads.usermodel import build_model

        return build_model(config.model, config.model_args)
    if config.arch == "mlp":
        return nn.Sequential(
            nn.Flatten(), nn.Linear(data.num_features, config.hidden), nn.ReLU(),
            nn.Linear(config.hidden, data.num_classes),
        )
    channels, height, width = data.image_shape
    if config.arch == "simple_cnn":
        return simple_cnn(channels, height, width, data.num_classes)
    norm: Callable[[int], nn.Module] = nn.BatchNorm2d if config.norm == "batch" else lambda _: nn.Identity()
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), norm(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), norm(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (height // 2) * (width // 2), config.hidden), nn.ReLU(),
        nn.Linear(config.hidden, data.num_classes),
    )


def simple_cnn(channels: int, height: int, width: int, num_classes: int) -> nn.Module:
    """SDEA's BatchNorm-free backbone (see the module docstring), written from its layer sizes."""
    side_h, side_w = ((height - 4) // 2 - 4) // 2, ((width - 4) // 2 - 4) // 2
    if min(side_h, side_w) < 1:
        raise ValueError(f"arch simple_cnn needs images of at least 16x16; these are {height}x{width}")
    return nn.Sequential(
        nn.Conv2d(channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(16 * side_h * side_w, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 84), nn.ReLU(), nn.Linear(84, 256),  # the projection head of SDEA's SimpleCNN
        nn.Linear(256, num_classes),
    )


def make_optimizer(model: nn.Module, config: ClassifierConfig) -> torch.optim.Optimizer:
    """SGD with momentum, as in the FL papers this testbed hosts."""
    return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                           weight_decay=config.weight_decay)


def on_device_of(model: nn.Module, data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """``data``'s features and labels as tensors on ``model``'s device (moved once per call, not
    per batch: client data sets are small; on the CPU they share the arrays' memory)."""
    device = model_device(model)
    return torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)


def evaluate_model(model: nn.Module, data: Dataset, batch_size: int = 512) -> dict[str, float]:
    """Accuracy and mean cross-entropy of ``model`` on ``data``."""
    model.eval()
    x, y = on_device_of(model, data)
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            logits = model(x[start : start + batch_size])
            target = y[start : start + batch_size]
            loss_sum += nn.functional.cross_entropy(logits, target, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == target).sum())
    return {"accuracy": correct / len(y), "loss": loss_sum / len(y)}


def confusion_matrix(model: nn.Module, data: Dataset) -> np.ndarray:
    """Counts of (true class, predicted class) on ``data``."""
    model.eval()
    with torch.no_grad():
        predicted = model(on_device_of(model, data)[0]).argmax(dim=1).cpu().numpy()
    matrix = np.zeros((data.num_classes, data.num_classes), dtype=np.int64)
    np.add.at(matrix, (data.y, predicted), 1)
    return matrix


class BatchStream:
    """Shuffled mini-batches, epoch after epoch, whose position is part of the saved state."""

    def __init__(self, num_items: int, batch_size: int, generator: torch.Generator):
        self.num_items, self.batch_size, self.generator = num_items, batch_size, generator
        self.order = torch.randperm(num_items, generator=generator)
        self.cursor = 0

    def next(self) -> torch.Tensor:
        if self.cursor + self.batch_size > self.num_items:
            self.order = torch.randperm(self.num_items, generator=self.generator)
            self.cursor = 0
        batch = self.order[self.cursor : self.cursor + self.batch_size]
        self.cursor += self.batch_size
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order.clone(), "cursor": self.cursor, "rng": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order, self.cursor = state["order"].clone(), state["cursor"]
        self.generator.set_state(state["rng"])


def train_epochs(model: nn.Module, optimizer: torch.optim.Optimizer, data: Dataset, epochs: int,
                 batch_size: int, generator: torch.Generator, proximal_mu: float = 0.0) -> float:
    """Local epochs of SGD over shuffled batches, with FedProx's proximal term when ``proximal_mu`` > 0."""
    model.train()
    x, y = on_device_of(model, data)
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
    total, batches = 0.0, 0
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            batch = order[start : start + batch_size]
            if len(batch) < 2 and len(y) >= 2:
                continue  # batch norm cannot train on a single sample
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            if anchor is not None:
                loss = loss + proximal_mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
            total, batches = total + optimizer_step(optimizer, loss), batches + 1
    return total / max(batches, 1)


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, data: Dataset,
                stream: BatchStream, steps: int) -> float:
    """Take ``steps`` SGD steps on batches from ``stream``; return the mean training loss."""
    model.train()
    x, y = on_device_of(model, data)
    total = 0.0
    for _ in range(steps):
        batch = stream.next()
        total += optimizer_step(optimizer, nn.functional.cross_entropy(model(x[batch]), y[batch]))
    return total / steps
