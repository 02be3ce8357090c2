"""Typed config of the ``bisam`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.errors import ScenarioError
from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.classifier.config import check as classifier_check

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

# The kinds the workload runs under, declared here so that validating a federated scenario
# imports no model code (its class must be a `FederatedWorkload`: checked as it is created).
KINDS = ("workload", "federated")

# The classifier's membership audit, which BiSAM's model (a classifier) offers too (`testbed.workloads.registry`).
AUDITS = {"membership": "testbed.workloads.classifier.membership:MembershipAudit"}

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
    label_smoothing: float = Field(0.0, ge=0, lt=1, description="of the cross-entropy (the authors' runs: 0.1)")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="cosine: lr * (1 + cos(pi t / schedule_steps)) / 2, the authors' schedule")
    schedule_steps: int | None = Field(None, gt=0, description="cosine: its horizon, the run's training.steps")
    validation_fraction: float = Field(
        0.0, ge=0, lt=1, description="share of the training split held out to select the checkpoint (0: none)")


def check(config: BiSAMConfig, data: DataConfig) -> None:
    """The classifier's check (``arch: cnn`` needs image data); a cosine schedule needs its horizon."""
    classifier_check(config, data)
    if config.lr_schedule == "cosine" and config.schedule_steps is None:
        raise ScenarioError("workload.schedule_steps: lr_schedule 'cosine' needs its horizon; "
                            "set it to the run's training.steps")
