"""Workload ``bisam``: the digits classifier trained with SGD, SAM or BiSAM, optionally on noisy labels.

The network, data split and batches are those of the ``classifier`` workload; only the update
differs (``variant``): ``sgd`` steps on the cross-entropy, ``sam`` perturbs the weights along the
cross-entropy gradient first (Foret et al. 2021), ``bisam`` along the gradient of a lower bound
of the 0-1 loss (Xie et al. 2024, Eq. for Q_{phi,mu}). ``label_noise`` replaces that fraction of the
training labels by a uniformly drawn different class (symmetric noise, the paper's noisy-label
setting); the test split stays clean. The metric is test accuracy, as in the paper.
``validation_fraction`` holds out part of the training split (with the same label noise: a user
has no clean labels either) and reports ``test_accuracy_at_best_val``, the test accuracy of the
evaluation with the best validation accuracy, so no checkpoint is chosen on the test set.
``label_smoothing`` and ``lr_schedule: cosine`` are the authors' training recipe.

The workload is also a `FederatedWorkload`: in ``kind: federated`` scenarios each client trains
its local epochs with the same update (``label_noise`` applies only to central training there;
federated label flipping belongs to the federated runner's attacks).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from testbed.config import StrictModel
from testbed.data import Dataset, train_test_split
from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.bisam.config import BiSAMConfig, check
from testbed.workloads.bisam.optimizer import BiSAM
from testbed.workloads.bisam.report import PerturbationProfileSection
from testbed.workloads.bisam.surrogate import LowerBoundSurrogate, zero_one_loss
from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.classifier.model import BatchStream, evaluate_model, make_optimizer, on_device_of
from testbed.workloads.classifier.report import ConfusionSection
from testbed.workloads.classifier.workload import ClassifierWorkload

# Radii of the perturbation profile in the report, in units of rho.
PROFILE_RADII = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0)
PROFILE_SAMPLES = 512


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
    """The classifier's SGD wrapped for the configured variant; SAM ascends and every variant
    descends the cross-entropy with the configured label smoothing (BiSAM ascends its bound)."""
    cross_entropy = functools.partial(F.cross_entropy, label_smoothing=config.label_smoothing)
    ascent = {"sgd": None, "sam": cross_entropy,
              "bisam": LowerBoundSurrogate(config.surrogate, config.mu, config.alpha)}[config.variant]
    return BiSAM(make_optimizer(model, config), rho=config.rho, ascent_loss=ascent, upper_loss=cross_entropy,
                 model=model)


def learning_rate_at(config: BiSAMConfig) -> Callable[[int], float]:
    """The learning rate of step ``t`` (0-based): constant, or cosine from ``lr`` to 0 over the horizon."""
    if config.lr_schedule == "constant":
        return lambda t: config.lr
    horizon = config.schedule_steps
    assert horizon is not None  # check() refuses a cosine schedule without its horizon
    return lambda t: config.lr * (1 + math.cos(math.pi * min(t, horizon) / horizon)) / 2


def train_sharpness_steps(model: nn.Module, optimizer: BiSAM, data: Dataset, stream: BatchStream,
                          steps: int, lr_at: Callable[[int], float] | None = None,
                          first_step: int = 0) -> dict[str, float]:
    """``steps`` updates; returns the mean loss and 0-1 error of the batches at the weights descended,
    and the mean ascent objective at ``w`` (the lower bound for bisam, CE for sam; absent for sgd).
    ``lr_at`` sets the learning rate of each step from its index (``first_step`` onwards)."""
    model.train()
    x, y = on_device_of(model, data)
    loss_sum, error_sum, ascent_sum = 0.0, 0.0, 0.0
    for index in range(steps):
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(first_step + index)
        batch = stream.next()
        last_logits: list[torch.Tensor] = []

        def closure(loss_fn, batch=batch, last_logits=last_logits):  # called within this iteration's step
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
    x, y = on_device_of(model, data)
    anchor = [p.detach().clone() for p in model.parameters()]
    total, batches = 0.0, 0
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            batch = order[start : start + batch_size]
            if len(batch) < 2 <= len(y):
                continue  # batch norm cannot train on a single sample

            def closure(loss_fn, batch=batch):  # called within this iteration's step
                loss = loss_fn(model(x[batch]), y[batch])
                if proximal_mu > 0 and not optimizer.in_ascent:
                    loss = loss + proximal_mu / 2 * sum(((p - a) ** 2).sum()
                                                        for p, a in zip(model.parameters(), anchor))
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


class BiSAMWorkload(ClassifierWorkload):
    """Digits classifier trained with SGD, SAM or BiSAM (bilevel SAM with a 0-1 lower bound).

    The classifier's network, split, batches and checkpoint; only the update (`optimizer_for`,
    `train`, `fit_client`), the label noise of the training split and the extra metrics and
    report arrays are BiSAM's.
    """

    name = "bisam"
    Config = BiSAMConfig
    config: BiSAMConfig
    optimizer: BiSAM  # built by optimizer_for
    check = staticmethod(check)
    checkpointed = (*ClassifierWorkload.checkpointed, "best_validation")
    supports_cuda = True  # its batches too go to the model's device (`on_device_of`)
    report_sections = [PerturbationProfileSection(), ConfusionSection()]

    def __init__(self, config: BiSAMConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        train = self.train_set
        self.validation_set: Dataset | None = None
        if config.validation_fraction > 0:
            train, validation = train_test_split(train, config.validation_fraction, seeds.integer("data.validation"))
            noisy_validation, _ = corrupt_labels(validation.y, validation.num_classes, config.label_noise,
                                                 seeds.numpy("data.label_noise.validation"))
            self.validation_set = Dataset(validation.name, validation.x, noisy_validation,
                                          validation.num_classes, validation.image_shape)
            # The stream drew its order for the whole split: draw it again for the smaller one.
            self.stream = BatchStream(len(train.y), min(config.batch_size, len(train.y)),
                                      seeds.torch("data.batches"))
        noisy, self.flipped = corrupt_labels(train.y, train.num_classes, config.label_noise,
                                             seeds.numpy("data.label_noise"))
        self.train_set = Dataset(train.name, train.x, noisy, train.num_classes, train.image_shape)
        # (best validation accuracy so far, the test accuracy of that evaluation)
        self.best_validation = (-1.0, float("nan"))

    @classmethod
    def optimizer_for(cls, model: nn.Module, config: ClassifierConfig) -> BiSAM:
        assert isinstance(config, BiSAMConfig)  # called by __init__ with the workload's own config
        return make_sharpness_optimizer(model, config)

    @classmethod
    def fit_client(cls, model: nn.Module, data: Dataset, config: StrictModel, epochs: int,
                   generator: torch.Generator, proximal_mu: float = 0.0) -> float:
        assert isinstance(config, BiSAMConfig)  # the federated setup validates the workload's own Config
        optimizer = make_sharpness_optimizer(model, config)
        return train_sharpness_epochs(model, optimizer, data, epochs, config.batch_size, generator, proximal_mu)

    def train(self, steps: int) -> dict[str, float]:
        metrics = train_sharpness_steps(self.model, self.optimizer, self.train_set, self.stream, steps,
                                        learning_rate_at(self.config), self.steps_done)
        self.steps_done += steps
        return metrics

    def evaluate(self) -> dict[str, float]:
        metrics = super().evaluate()
        metrics["train_fit"] = evaluate_model(self.model, self.train_set)["accuracy"]
        if self.validation_set is not None:
            metrics["val_accuracy"] = evaluate_model(self.model, self.validation_set)["accuracy"]
            if metrics["val_accuracy"] > self.best_validation[0]:  # the first of equal ones is kept
                self.best_validation = (metrics["val_accuracy"], metrics["test_accuracy"])
            metrics["best_val_accuracy"], metrics["test_accuracy_at_best_val"] = self.best_validation
        if self.flipped.any():
            flipped = np.flatnonzero(self.flipped)
            noisy_part = Dataset("flipped", self.train_set.x[flipped], self.train_set.y[flipped],
                                 self.train_set.num_classes, self.train_set.image_shape)
            metrics["noisy_labels_memorised"] = evaluate_model(self.model, noisy_part)["accuracy"]
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        config = self.config
        surrogate = LowerBoundSurrogate(config.surrogate, config.mu, config.alpha)
        x, y = (tensor[:PROFILE_SAMPLES] for tensor in on_device_of(self.model, self.train_set))
        radii = np.asarray(PROFILE_RADII) * config.rho
        # The profile before the confusion matrix, as it always was: undoing its perturbations is not exact.
        profile = perturbation_profile(self.model, surrogate, x, y, radii)
        return {**super().artifacts(), "profile_radius": radii, **profile}
