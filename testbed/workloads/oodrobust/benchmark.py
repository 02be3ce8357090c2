"""`evaluate_ood`: one model's robustness in distribution and under dataset and threat shifts.

OODRobustBench (Li et al. 2024, Sec. 3) measures, for one model trained against a *seen* threat:

* ID: clean accuracy and robust accuracy on the source test set under the seen threat, with a
  strong attack (their MM5; here the PGD-CE-with-restarts + MM-k ensemble of `attacks`);
* OOD_d: the same seen-threat attack run on shifted inputs: corruptions at several severities
  (`shifts`) and a natural shift, a second source of the same classes (`typeset`);
* OOD_t: threats the model was not trained against, on ID inputs: a larger L-inf budget, an L2
  ball, rotations, an adversarial patch.

OOD_d and OOD_t are the means over their shifts (the paper's aggregate). Any image classifier
with inputs in [0, 1] works, so a federated run's final global model is evaluated the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from testbed.data import Dataset
from testbed.seeding import SeedTree, stream
from testbed.workloads.oodrobust import attacks
from testbed.workloads.oodrobust.config import OodConfig
from testbed.workloads.oodrobust.shifts import corrupt
from testbed.workloads.oodrobust.typeset import typeset_digits

# The audit's own tree, rooted at the integer the run draws for it (`OOD_SEED`): its streams.
CORRUPT = stream("ood/corrupt.{}", "a corruption's noise on the OOD audit's samples (one generator for every severity)")
TYPESET = stream("ood/typeset", "the typeset digits of the OOD audit's natural shift")
ATTACK_ID = stream("ood.attack/id", "the seen-threat attack on the OOD audit's ID samples")
ATTACK_SHIFTS = stream("ood.attack/dataset_shifts", "the seen-threat attack on the OOD audit's shifted sets")
ATTACK_THREAT = stream("ood.attack/t.{}", "an unseen threat's attack in the OOD audit")

NATURAL_SHIFT = "typeset"
ROTATION_ANGLES = 13
PATCH_STEPS = 10


@dataclass(frozen=True)
class ShiftedSets:
    """The ID evaluation inputs and every dataset-shifted copy, built once for a whole population."""

    x: torch.Tensor
    y: torch.Tensor
    dataset_shifts: dict[str, tuple[torch.Tensor, torch.Tensor]]


def supports_natural_shift(data: Dataset) -> bool:
    """The typeset digits are 8x8 digit images of 10 classes, like scikit-learn's digits."""
    return data.image_shape == (1, 8, 8) and data.num_classes == 10


def check_image_data(data: Dataset) -> None:
    """The corruptions and attacks need images with pixel values in [0, 1]."""
    if data.image_shape is None:
        raise ValueError(f"dataset '{data.name}' is tabular; the OOD evaluation needs image data")
    if data.x.size and (data.x.min() < 0 or data.x.max() > 1):
        raise ValueError(f"dataset '{data.name}' has pixels outside [0, 1]")


def build_shifted_sets(data: Dataset, config: OodConfig, seed: int) -> ShiftedSets:
    """The first ``eval_size`` test samples and their corrupted and natural-shift counterparts."""
    check_image_data(data)
    seeds = SeedTree(seed, strict=True).child("ood")
    x = torch.from_numpy(data.x[: config.eval_size]).float()
    y = torch.from_numpy(data.y[: config.eval_size]).long()
    shifted: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in config.corruptions:
        for severity in sorted(set(config.severities)):
            # The same generator for every severity: common random numbers, so severities differ only in strength.
            shifted[f"{name}-{severity}"] = (corrupt(x, name, severity, seeds.torch(f"corrupt.{name}")), y)
    if config.natural and supports_natural_shift(data):
        images, labels = typeset_digits(len(y), seeds.numpy("typeset"))
        shifted[NATURAL_SHIFT] = (torch.from_numpy(images), torch.from_numpy(labels))
    return ShiftedSets(x, y, shifted)


def seen_threat_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, config: OodConfig,
                       generator: torch.Generator, epsilon: float | None = None,
                       norm: attacks.Norm = "linf") -> torch.Tensor:
    """Robust-accuracy mask under the configured ID attack (the strong ensemble or one PGD-CE run)."""
    epsilon = config.epsilon if epsilon is None else epsilon
    if config.id_attack == "pgd":
        return attacks.pgd_robust(model, x, y, norm, epsilon, config.attack_steps, generator)
    return attacks.ensemble_robust(model, x, y, norm, epsilon, config.attack_steps, config.restarts,
                                   config.margin_classes, generator)


def threat_shift_robust(model: nn.Module, x: torch.Tensor, y: torch.Tensor, threat: str, config: OodConfig,
                        generator: torch.Generator) -> torch.Tensor:
    """Robust-accuracy mask under one unseen threat."""
    if threat == "linf_large":
        return seen_threat_robust(model, x, y, config, generator, config.linf_large_scale * config.epsilon)
    if threat == "l2":
        return seen_threat_robust(model, x, y, config, generator, config.l2_epsilon, "l2")
    if threat == "rotation":
        return attacks.rotation_robust(model, x, y, config.rotation_degrees, ROTATION_ANGLES)
    if threat == "patch":
        return attacks.patch_robust(model, x, y, config.patch_size, PATCH_STEPS, generator)
    raise ValueError(f"unknown threat '{threat}'")


def _fraction(mask: torch.Tensor) -> float:
    return float(mask.float().mean()) if len(mask) else float("nan")


def dataset_shift_results(model: nn.Module, shifted: ShiftedSets, config: OodConfig,
                          generator: torch.Generator) -> dict[str, float]:
    """Clean and seen-threat robust accuracy on every dataset shift.

    The shifted sets are attacked as one batch: each sample's attack is independent of the others,
    and one large batch costs far less than many small ones.
    """
    if not shifted.dataset_shifts:
        return {}
    x = torch.cat([x for x, _ in shifted.dataset_shifts.values()])
    y = torch.cat([y for _, y in shifted.dataset_shifts.values()])
    clean = attacks.correct_mask(model, x, y)
    robust = seen_threat_robust(model, x, y, config, generator)
    result, start = {}, 0
    for name, (_, labels) in shifted.dataset_shifts.items():
        part = slice(start, start + len(labels))
        result[f"clean/{name}"], result[f"robust/{name}"] = _fraction(clean[part]), _fraction(robust[part])
        start += len(labels)
    return result


def evaluate_ood(model: nn.Module, dataset: Dataset, config: OodConfig, seed: int = 0,
                 shifted: ShiftedSets | None = None, id_only: bool = False) -> dict[str, float]:
    """Clean and robust accuracy of ``model`` in distribution, per shift, and the OOD_d / OOD_t means.

    ``dataset`` is the ID test split (images in [0, 1]); ``shifted`` may pass sets built once by
    `build_shifted_sets` for many models; ``id_only`` stops after the ID numbers (the RobustBench
    protocol the paper argues is not enough). Keys: ``clean_accuracy``, ``id_robust``,
    ``clean/<shift>`` and ``robust/<shift>`` per dataset shift, ``robust/<threat>`` per threat,
    ``ood_d_clean``, ``ood_d_robust``, ``ood_t_robust`` and ``ood_d_retention`` (OOD_d / ID robustness).
    """
    shifted = shifted or build_shifted_sets(dataset, config, seed)
    seeds = SeedTree(seed, strict=True).child("ood.attack")
    was_training = model.training
    model.eval()
    try:
        result = {"clean_accuracy": _fraction(attacks.correct_mask(model, shifted.x, shifted.y)),
                  "id_robust": _fraction(seen_threat_robust(model, shifted.x, shifted.y, config, seeds.torch("id")))}
        if id_only:
            return result
        result.update(dataset_shift_results(model, shifted, config, seeds.torch("dataset_shifts")))
        for threat in config.threats:
            mask = threat_shift_robust(model, shifted.x, shifted.y, threat, config, seeds.torch(f"t.{threat}"))
            result[f"robust/{threat}"] = _fraction(mask)
    finally:
        model.train(was_training)
    return {**result, **aggregate(result, list(shifted.dataset_shifts), list(config.threats))}


def aggregate(result: dict[str, float], dataset_shifts: list[str], threats: list[str]) -> dict[str, float]:
    """OOD_d clean/robust and OOD_t robust as means over shifts, and OOD_d retention."""
    mean = lambda keys: float(np.mean([result[k] for k in keys])) if keys else float("nan")
    ood_d_robust = mean([f"robust/{s}" for s in dataset_shifts])
    retention = ood_d_robust / result["id_robust"] if result["id_robust"] > 0 else float("nan")
    return {"ood_d_clean": mean([f"clean/{s}" for s in dataset_shifts]), "ood_d_robust": ood_d_robust,
            "ood_t_robust": mean([f"robust/{t}" for t in threats]), "ood_d_retention": retention}
