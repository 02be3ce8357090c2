"""The typed config of the STC workload and its check, free of torch so that validating a scenario
does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class STCConfig(StrictModel):
    """Neuron, task, network and optimiser of the STC workload."""

    variant: Literal["stc", "lif", "plif"] = "stc"
    task: Literal["predict", "recall"] = "predict"
    frames_in: int = Field(5, gt=0, description="predict: true input frames before the closed-loop future")
    delay: int = Field(8, gt=0, description="recall: steps between the frame and the cue")
    channels: int = Field(16, gt=0)
    layers: int = Field(2, gt=0)
    groups: int = Field(4, gt=0, description="GroupNorm groups (must divide channels)")
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
