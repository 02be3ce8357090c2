"""The typed config of the PPAE workload and its check, free of torch so that validating a scenario
does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class PPAEConfig(StrictModel):
    """The diffusion model, its training, and the editing pipeline's settings."""

    variant: Literal["ppae", "regenerate", "sdedit"] = "ppae"
    operation: Literal["replace", "reweight"] = Field(
        "replace", description="ppae: swap the event's word, or reweight its attention map in place")
    reweight_scale: float = Field(2.0, gt=0, description="operation reweight: factor on the token's map")
    train_clips: int = Field(2000, ge=64)
    test_clips: int = Field(128, ge=8, description="held-out clips, each edited once")
    hidden: int = Field(64, gt=0)
    heads: int = Field(4, gt=0)
    layers: int = Field(2, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(64, gt=0)
    diffusion_steps: int = Field(100, ge=10, description="T of the DDPM training schedule")
    sample_steps: int = Field(25, ge=2, description="DDIM steps for inversion and editing")
    inject_frac: float = Field(0.4, ge=0, le=1, description="share of the steps that use the source's maps")
    global_frac: float = Field(0.2, ge=0, lt=1, description="share of the last steps run without the local blend")
    threshold: float = Field(0.5, gt=0, le=1, description="mask threshold, as a share of the map's maximum")
    blend: bool = Field(True, description=(
        "ppae: the local blend (frames outside the mask reset to the source's latent); false: the ablation "
        "without it, attention injection only"))
    mask: Literal["attention", "oracle"] = Field("attention", description=(
        "ppae: the blend's mask: the edited word's thresholded cross-attention, or (ablation) the true frames "
        "of the edited event"))
    sdedit_strength: float = Field(0.6, gt=0, le=1, description="sdedit: noise level t0 / T")


def check(config: PPAEConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    if config.sample_steps > config.diffusion_steps:
        raise ScenarioError(f"workload.sample_steps: {config.sample_steps} exceeds diffusion_steps "
                            f"{config.diffusion_steps}")
    if config.batch_size > config.train_clips:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_clips {config.train_clips}")
    if config.hidden % config.heads:
        raise ScenarioError(f"workload.heads: {config.heads} does not divide hidden {config.hidden}")
    for field, value, default in (("blend", config.blend, True), ("mask", config.mask, "attention")):
        if value != default and config.variant != "ppae":
            raise ScenarioError(f"workload.{field}: {value} is an ablation of the local blend; variant "
                                f"'{config.variant}' has none")
    if config.mask == "oracle" and not config.blend:
        raise ScenarioError("workload.mask: oracle replaces the local blend's mask, and blend: false has none")
    if config.operation == "reweight" and config.variant != "ppae":
        raise ScenarioError(f"workload.operation: reweight is an attention edit; variant '{config.variant}' "
                            "has no attention control")
