"""Typed config of the ``classifier`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import FiniteValue, StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


# The kinds the workload runs under, declared here so that validating a federated scenario
# imports no model code (its class must be a `FederatedWorkload`: checked as it is created).
KINDS = ("workload", "federated")

# The audits the workload offers, by ``report:`` key: the audit's module, imported only when a
# report switches it on (it needs no torch to validate), never the model code.
AUDITS = {"membership": "testbed.workloads.classifier.membership:MembershipAudit"}

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
    model: str | None = Field(None, description="your own torch.nn.Module class, 'package.module:ClassName', "
                                                "instead of arch (it runs that package's code: name one you trust)")
    model_args: dict[str, FiniteValue] = Field(default_factory=dict, description="keyword arguments of model")


def check(config: ClassifierConfig, data: DataConfig) -> None:
    """``arch: cnn`` and ``simple_cnn`` need image data; ``simple_cnn`` images of at least 16x16; a
    ``model`` of the user's own must import, build and run on the scenario's data."""
    from testbed.data.select import is_image_data

    if config.model is not None:
        _check_user_model(config, data)
        return
    if config.model_args:
        raise ScenarioError("workload.model_args: arguments of workload.model, which is not set")
    if config.arch in ("cnn", "simple_cnn") and not is_image_data(data):
        raise ScenarioError(
            f"workload.arch: '{config.arch}' needs image data but data.dataset '{data.dataset}' is tabular; "
            "use arch: mlp"
        )
    if config.arch == "simple_cnn" and data.dataset in SMALL_IMAGE_DATASETS:
        raise ScenarioError(f"workload.arch: 'simple_cnn' needs images of at least 16x16; data.dataset "
                            f"'{data.dataset}' has 8x8 images; use arch: cnn")


def _check_user_model(config: ClassifierConfig, data: DataConfig) -> None:
    """Import, build and run the user's model on two samples of the scenario's data (`testbed.workloads.usermodel`)."""
    from testbed.workloads.usermodel import probe_data

    if "arch" in config.model_fields_set:
        raise ScenarioError("workload.arch: a workload with its own model takes no arch; remove one of the two")
    assert config.model is not None  # the caller checks
    probe_data(config.model, json.dumps(config.model_args, sort_keys=True),
               json.dumps(data.model_dump(mode="json"), sort_keys=True))
