"""Typed config of the ``bisam`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.classifier.config import check as classifier_check

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

# Which phi the lower bound of the 0-1 loss uses (`testbed.workloads.bisam.surrogate`).
SurrogateName = Literal["neg_log", "tanh"]


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


def check(config: BiSAMConfig, data: DataConfig) -> None:
    """The classifier's check: ``arch: cnn`` needs image data."""
    classifier_check(config, data)
