"""Workload ``bisam``: the digits classifier trained with SGD, SAM or BiSAM, optionally on noisy labels.

The network, data split and batches are those of the ``classifier`` workload; only the update
differs (``variant``): ``sgd`` steps on the cross-entropy, ``sam`` perturbs the weights along the
cross-entropy gradient first (Foret et al. 2021), ``bisam`` along the gradient of a lower bound
of the 0-1 loss (Xie et al. 2024, Eq. for Q_{phi,mu}). ``label_noise`` replaces that fraction of the
training labels by a uniformly drawn different class (symmetric noise, the paper's noisy-label
setting); the test split stays clean. The metric is test accuracy, as in the paper.

The workload is also a `FederatedWorkload`: in ``kind: federated`` scenarios each client trains
its local epochs with the same update (``label_noise`` applies only to central training there;
federated label flipping belongs to the federated runner's attacks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from testbed.data import Dataset, load_selected, train_test_split
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, image
from testbed.scenario import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import FederatedWorkload, register
from testbed.workloads.bisam.optimizer import BiSAM
from testbed.workloads.bisam.surrogate import LowerBoundSurrogate, SurrogateName, zero_one_loss
from testbed.workloads.classifier import (
    BatchStream, Classifier, ClassifierConfig, ConfusionSection, build_classifier, confusion_matrix,
    evaluate_model, make_optimizer,
)

# Radii of the perturbation profile in the report, in units of rho.
PROFILE_RADII = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0)
PROFILE_SAMPLES = 512


class BiSAMConfig(ClassifierConfig):
    """The classifier's keys plus the sharpness-aware update and the label noise."""

    arch: Literal["cnn", "mlp"] = "mlp"
    hidden: int = Field(256, gt=0)
    variant: Literal["sgd", "sam", "bisam"] = "bisam"
    rho: float = Field(0.05, gt=0, description="radius of the weight perturbation (sam, bisam)")
    surrogate: SurrogateName = Field("neg_log", description="phi of BiSAM's lower bound: neg_log | tanh")
    mu: float = Field(1.0, gt=0, description="log-sum-exp temperature of Q_{phi,mu}")
    alpha: float = Field(0.1, gt=0, description="slope of phi(t) = tanh(alpha t)")
    label_noise: float = Field(0.0, ge=0, lt=1, description="fraction of training labels flipped")


def corrupt_labels(labels: np.ndarray, num_classes: int, fraction: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric label noise: ``fraction`` of the labels move to a uniformly drawn *other* class.

    Returns the noisy labels and the boolean mask of the flipped samples.
    """
    flipped = np.zeros(len(labels), dtype=bool)
    flipped[rng.choice(len(labels), size=round(fraction * len(labels)), replace=False)] = True
    shift = rng.integers(1, num_classes, size=len(labels))
    noisy = np.where(flipped, (labels + shift) % num_classes, labels)
    return noisy.astype(labels.dtype), flipped


def make_sharpness_optimizer(model: nn.Module, config: BiSAMConfig) -> BiSAM:
    """The classifier's SGD wrapped for the configured variant."""
    ascent = {"sgd": None, "sam": F.cross_entropy,
              "bisam": LowerBoundSurrogate(config.surrogate, config.mu, config.alpha)}[config.variant]
    return BiSAM(make_optimizer(model, config), rho=config.rho, ascent_loss=ascent, model=model)


def train_sharpness_steps(model: nn.Module, optimizer: BiSAM, data: Dataset, stream: BatchStream,
                          steps: int) -> dict[str, float]:
    """``steps`` updates; returns the mean loss and 0-1 error of the batches at the weights descended,
    and the mean ascent objective at ``w`` (the lower bound for bisam, CE for sam; absent for sgd)."""
    model.train()
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    loss_sum, error_sum, ascent_sum = 0.0, 0.0, 0.0
    for _ in range(steps):
        batch = stream.next()
        last_logits: list[torch.Tensor] = []

        def closure(loss_fn):
            last_logits[:] = [model(x[batch])]
            return loss_fn(last_logits[0], y[batch])

        loss_sum += float(optimizer.step(closure))
        error_sum += float(zero_one_loss(last_logits[0].detach(), y[batch]).mean())
        ascent_sum += optimizer.last_ascent_value
    metrics = {"train_loss": loss_sum / steps, "perturbed_batch_error": error_sum / steps}
    if optimizer.ascent_loss is not None:
        metrics["ascent_objective"] = ascent_sum / steps
    return metrics


def train_sharpness_epochs(model: nn.Module, optimizer: BiSAM, data: Dataset, epochs: int, batch_size: int,
                           generator: torch.Generator, proximal_mu: float = 0.0) -> float:
    """A federated client's local epochs with the sharpness-aware update; returns the mean loss.

    ``proximal_mu`` adds FedProx's ``(mu/2) ||w - w_start||^2`` to the descended (upper) loss only:
    the perturbation still ascends the classification objective alone.
    """
    model.train()
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    anchor = [p.detach().clone() for p in model.parameters()]
    total, batches = 0.0, 0
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            batch = order[start : start + batch_size]
            if len(batch) < 2 <= len(y):
                continue  # batch norm cannot train on a single sample

            def closure(loss_fn):
                loss = loss_fn(model(x[batch]), y[batch])
                if proximal_mu > 0 and not optimizer.in_ascent:
                    loss = loss + proximal_mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
                return loss

            total, batches = total + float(optimizer.step(closure)), batches + 1
    return total / max(batches, 1)


def _unit_gradient(model: nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, list(model.parameters()))
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    return [g / norm.clamp_min(1e-12) for g in grads]


def perturbation_profile(model: nn.Module, surrogate: LowerBoundSurrogate, x: torch.Tensor, y: torch.Tensor,
                         radii: np.ndarray) -> dict[str, np.ndarray]:
    """0-1 error of ``w + r d`` for ``d`` the unit gradient of the surrogate (BiSAM) and of CE (SAM).

    Also the surrogate's own value along its direction, which must stay under the 0-1 error.
    """
    model.eval()
    directions = {"surrogate": _unit_gradient(model, surrogate(model(x), y)),
                  "ce": _unit_gradient(model, F.cross_entropy(model(x), y))}
    profile = {f"profile_error_{name}": np.zeros(len(radii)) for name in directions}
    profile["profile_surrogate"] = np.zeros(len(radii))
    params = list(model.parameters())
    with torch.no_grad():
        for name, direction in directions.items():
            for index, radius in enumerate(radii):
                for param, step in zip(params, direction):
                    param.add_(step, alpha=float(radius))
                logits = model(x)
                profile[f"profile_error_{name}"][index] = float(zero_one_loss(logits, y).mean())
                if name == "surrogate":
                    profile["profile_surrogate"][index] = float(surrogate(logits, y))
                for param, step in zip(params, direction):
                    param.sub_(step, alpha=float(radius))
    return profile


class PerturbationProfileSection(ReportSection):
    """How much each ascent direction raises the training 0-1 error, and the lower bound under it."""

    title = "0-1 error along the perturbation directions (final weights, 512 training samples)"

    def render(self, data: RunData, out_dir: Path) -> str:
        if "profile_radius" not in data.artifacts:
            return "<p>No perturbation profile was saved (the run has not finished).</p>"
        radii = data.artifacts["profile_radius"].tolist()
        lines = {"0-1 error along grad Q (BiSAM)": (radii, data.artifacts["profile_error_surrogate"].tolist()),
                 "0-1 error along grad CE (SAM)": (radii, data.artifacts["profile_error_ce"].tolist()),
                 "Q lower bound along grad Q": (radii, data.artifacts["profile_surrogate"].tolist())}
        path = plot_curve(out_dir / "bisam-profile.png", "perturbation strength", "radius ||eps||", lines)
        return image(path.name, "0-1 error against perturbation radius")


@register
class BiSAMWorkload(FederatedWorkload):
    """Digits classifier trained with SGD, SAM or BiSAM (bilevel SAM with a 0-1 lower bound)."""

    name = "bisam"
    Config = BiSAMConfig
    checkpointed = ("model", "optimizer", "stream", "steps_done")
    summary = "BiSAM: SAM whose perturbation ascends a lower bound of the 0-1 loss; sgd|sam|bisam, label noise"
    headline_metric = ("test_accuracy", "max")
    report_sections = [PerturbationProfileSection(), ConfusionSection()]

    @classmethod
    def check(cls, config: BiSAMConfig, data: DataConfig) -> None:
        Classifier.check(config, data)

    def __init__(self, config: BiSAMConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        full = load_selected(data)
        train, self.test_set = train_test_split(full, data.test_fraction, seeds.integer("data.split"))
        noisy, self.flipped = corrupt_labels(train.y, full.num_classes, config.label_noise,
                                             seeds.numpy("data.label_noise"))
        self.train_set = Dataset(train.name, train.x, noisy, train.num_classes, train.image_shape)
        torch.manual_seed(seeds.integer("model.init"))
        self.model = build_classifier(config, full)
        self.optimizer = make_sharpness_optimizer(self.model, config)
        self.stream = BatchStream(len(noisy), min(config.batch_size, len(noisy)), seeds.torch("data.batches"))
        self.steps_done = 0

    def build_model(self) -> nn.Module:
        return build_classifier(self.config, self.train_set)

    @classmethod
    def model_for(cls, config: BiSAMConfig, data: Dataset) -> nn.Module:
        return build_classifier(config, data)

    @classmethod
    def fit_client(cls, model: nn.Module, data: Dataset, config: BiSAMConfig, epochs: int,
                   generator: torch.Generator, proximal_mu: float = 0.0) -> float:
        optimizer = make_sharpness_optimizer(model, config)
        return train_sharpness_epochs(model, optimizer, data, epochs, config.batch_size, generator, proximal_mu)

    @classmethod
    def evaluate_model(cls, model: nn.Module, data: Dataset) -> dict[str, float]:
        return {f"test_{k}": v for k, v in evaluate_model(model, data).items()}

    def train(self, steps: int) -> dict[str, float]:
        metrics = train_sharpness_steps(self.model, self.optimizer, self.train_set, self.stream, steps)
        self.steps_done += steps
        return metrics

    def evaluate(self) -> dict[str, float]:
        metrics = self.evaluate_model(self.model, self.test_set)
        metrics["train_fit"] = evaluate_model(self.model, self.train_set)["accuracy"]
        if self.flipped.any():
            flipped = np.flatnonzero(self.flipped)
            noisy_part = Dataset("flipped", self.train_set.x[flipped], self.train_set.y[flipped],
                                 self.train_set.num_classes, self.train_set.image_shape)
            metrics["noisy_labels_memorised"] = evaluate_model(self.model, noisy_part)["accuracy"]
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        config = self.config
        surrogate = LowerBoundSurrogate(config.surrogate, config.mu, config.alpha)
        x = torch.from_numpy(self.train_set.x[:PROFILE_SAMPLES])
        y = torch.from_numpy(self.train_set.y[:PROFILE_SAMPLES])
        radii = np.asarray(PROFILE_RADII) * config.rho
        profile = perturbation_profile(self.model, surrogate, x, y, radii)
        return {"confusion": confusion_matrix(self.model, self.test_set), "profile_radius": radii, **profile}
