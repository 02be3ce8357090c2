"""Typed config of the ``classifier`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class ClassifierConfig(StrictModel):
    """Architecture and optimiser of the classifier."""

    arch: Literal["cnn", "mlp"] = "cnn"
    hidden: int = Field(64, gt=0)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-5, ge=0)
    batch_size: int = Field(32, gt=0)


def check(config: ClassifierConfig, data: DataConfig) -> None:
    """``arch: cnn`` needs image data."""
    from testbed.data.select import is_image_data

    if config.arch == "cnn" and not is_image_data(data):
        raise ScenarioError(
            f"workload.arch: 'cnn' needs image data but data.dataset '{data.dataset}' is tabular; use arch: mlp"
        )
