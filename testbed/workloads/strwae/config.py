"""Typed config of the ``strwae`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class StrWAEConfig(StrictModel):
    """Variant, sizes, the few labels, and the penalty weights (lambdas) of the objectives."""

    variant: Literal["strwae", "wae", "vae_hsic"] = "strwae"
    representation_dim: int = Field(8, gt=0, description="the representation: Z1 = h(Z, Y) (strwae), z (others)")
    style_dim: int = Field(2, gt=0, description="strwae: Z ~ N(0, I), what digit and light leave unexplained")
    hidden: int = Field(128, gt=0)
    labels_per_class: int = Field(10, gt=0, description="labelled training images per digit")
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(128, ge=4)
    labelled_batch_size: int = Field(32, ge=2)
    prior_weight: float = Field(10.0, ge=0, description="MMD(Q_Z, N(0, I))")
    label_marginal_weight: float = Field(1.0, ge=0, description="strwae: MMD(Q_Yhat, P_Y)")
    cross_entropy_weight: float = Field(5.0, ge=0, description="strwae: CE on labelled images")
    independence_weight: float = Field(100.0, ge=0, description="strwae: HSIC(Z, (Y, S)) + HSIC(Y, S)")
    invariance_weight: float = Field(100.0, ge=0, description="HSIC(Z1, S) (strwae), HSIC(z, s) (vae_hsic)")
    generated_samples: int = Field(400, ge=40)


def check(config: StrWAEConfig, data: DataConfig) -> None:
    """The data are the lit digits; a labelled batch cannot exceed the labelled images."""
    if data.dataset != "digits":
        raise ScenarioError(f"data.dataset: the strwae workload lights scikit-learn's digits; got "
                            f"'{data.dataset}' (use digits)")
    if config.labelled_batch_size > 10 * config.labels_per_class:
        raise ScenarioError(f"workload.labelled_batch_size: {config.labelled_batch_size} exceeds the "
                            f"{10 * config.labels_per_class} labelled images (labels_per_class x 10)")
