"""Typed config of the ``classifier`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


# Bundled image sets too small for simple_cnn's two 5x5 convolutions and poolings.
SMALL_IMAGE_DATASETS = frozenset({"digits"})


class ClassifierConfig(StrictModel):
    """Architecture and optimiser of the classifier."""

    arch: Literal["cnn", "simple_cnn", "mlp"] = "cnn"
    norm: Literal["batch", "none"] = Field(
        "batch", description="cnn: batch norm after each convolution, or none (the CNN of SDEA's code has none)")
    hidden: int = Field(64, gt=0)
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-5, ge=0)
    batch_size: int = Field(32, gt=0)


def check(config: ClassifierConfig, data: DataConfig) -> None:
    """``arch: cnn`` and ``simple_cnn`` need image data; ``simple_cnn`` images of at least 16x16."""
    from testbed.data.select import is_image_data

    if config.arch in ("cnn", "simple_cnn") and not is_image_data(data):
        raise ScenarioError(
            f"workload.arch: '{config.arch}' needs image data but data.dataset '{data.dataset}' is tabular; "
            "use arch: mlp"
        )
    if config.arch == "simple_cnn" and data.dataset in SMALL_IMAGE_DATASETS:
        raise ScenarioError(f"workload.arch: 'simple_cnn' needs images of at least 16x16; data.dataset "
                            f"'{data.dataset}' has 8x8 images; use arch: cnn")
