"""The typed config of the STC workload and its check, free of torch so that validating a scenario
does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


# The kinds the workload runs under, declared here so that validating a federated scenario
# imports no model code (its class must be a `FederatedWorkload`: checked as it is created).
KINDS = ("workload", "federated")


class STCConfig(StrictModel):
    """Neuron, task, network and optimiser of the STC workload."""

    variant: Literal["stc", "lif", "plif", "if"] = "stc"
    task: Literal["predict", "recall"] = "predict"
    frames_in: int = Field(5, gt=0, description="predict: true input frames before the closed-loop future")
    delay: int = Field(8, gt=0, description="recall: steps between the frame and the cue")
    channels: int = Field(16, gt=0)
    layers: int = Field(2, gt=0)
    groups: int = Field(4, gt=0, description="GroupNorm groups (must divide channels)")
    gate_groups: int | None = Field(None, gt=0, description=(
        "groups of the STC gate convolutions C_h, C_v (must divide channels); null: one group per channel "
        "(depthwise), the authors' 16 groups at 16 channels; 1: full convolutions"))
    lr: float = Field(3e-3, gt=0, description="Adam (the paper: 1e-3 over 500 epochs; faster at this scale)")
    batch_size: int = Field(16, gt=0)
    eval_size: int = Field(200, gt=0, description="test sequences scored at each evaluation")


def check(config: STCConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    from testbed.data.moving_digits import FRAMES  # imported on use: it loads numpy

    if data.dataset != "moving_digits":
        raise ScenarioError(f"workload.name: stc predicts sequences; set data.dataset: moving_digits "
                            f"(got '{data.dataset}')")
    if config.frames_in >= FRAMES:
        raise ScenarioError(f"workload.frames_in: {config.frames_in} leaves no frame to predict in the "
                            f"{FRAMES}-frame sequences of moving_digits")
    if config.channels % config.groups:
        raise ScenarioError(f"workload.groups: {config.groups} does not divide channels {config.channels}")
    if config.gate_groups is not None and config.channels % config.gate_groups:
        raise ScenarioError(f"workload.gate_groups: {config.gate_groups} does not divide channels {config.channels}")
