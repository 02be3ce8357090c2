"""Typed config of the ``vsdm`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class VSDMConfig(StrictModel):
    """Data shape, noise schedule, networks and the stage loop of VSDM."""

    variant: Literal["vsdm", "dsm"] = "vsdm"
    shape: Literal["spiral", "checkerboard"] = "spiral"
    stretch: float = Field(8.0, gt=0, description="factor on the stretched axis (y for spiral, x for checkerboard)")
    train_size: int = Field(3000, gt=0)
    eval_size: int = Field(2000, ge=2)
    beta_min: float = Field(0.1, gt=0)
    beta_max: float = Field(10.0, gt=0)
    beta_power: float = Field(1.7, gt=0, description="r in beta_t = beta_min + t^r (beta_max - beta_min)")
    time_steps: int = Field(100, ge=2, description="grid points of training, sampling and A updates")
    t_min: float = Field(1e-3, gt=0, lt=1)
    hidden: int = Field(128, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(256, gt=0)
    stage_steps: int = Field(300, gt=0, description="DSM iterations between two updates of A")
    a_paths: int = Field(512, gt=0, description="simulated backward paths per update of A")
    a_steps: int = Field(30, gt=0, description="gradient steps on A per stage")
    a_lr: float = Field(0.02, gt=0)
    zeta: float = Field(1.0, ge=0, description="weight of the divergence term (interact_coef)")


def check(config: VSDMConfig, data: DataConfig) -> None:
    """The schedule must rise; a batch cannot exceed the training set."""
    if config.beta_max < config.beta_min:
        raise ScenarioError(f"workload.beta_max: {config.beta_max} is below beta_min {config.beta_min}")
    if config.batch_size > config.train_size:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_size {config.train_size}")
