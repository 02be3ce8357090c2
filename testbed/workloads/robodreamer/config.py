"""The typed config of the RoboDreamer workload and its check, free of torch so that validating a
scenario does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class RoboDreamerConfig(StrictModel):
    """World size, network, diffusion and evaluation of the RoboDreamer workload."""

    variant: Literal["compositional", "monolithic"] = "compositional"
    goal_image: bool = Field(False, description="add the final frame as an extra factor (Eqs. 5-6)")
    grid: int = Field(7, ge=4, le=16, description="cells per side of the table")
    frames: int = Field(3, ge=1, description="frames generated after the given first frame (one cell per frame)")
    channels: int = Field(32, gt=0)
    embed: int = Field(64, ge=8, multiple_of=2)
    blocks: int = Field(3, ge=1)
    diffusion_steps: int = Field(100, ge=2)
    sample_steps: int = Field(20, ge=1, description="DDIM steps at evaluation")
    guidance: float = Field(4.0, gt=0, description="w of Alg. 2 (w = K is the plain product of experts)")
    p_uncond: float = Field(0.1, ge=0, lt=1, description="share of training rows with the null condition")
    lr: float = Field(1e-3, gt=0)
    # Each sample is a whole rendered video through the denoiser: 1024 of them take about half a GB,
    # and a batch of 100,000 would exhaust the memory of any machine before the first step.
    batch_size: int = Field(32, gt=0, le=1024)
    held_out_share: float = Field(0.25, gt=0, lt=0.5, description="share of move combinations never trained on")
    eval_per_combo: int = Field(4, gt=0, description="evaluation scenes per combination")


def check(config: RoboDreamerConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    if config.frames > config.grid - 2:
        # A vertical and a horizontal slide over the whole grid would always cross.
        raise ScenarioError(f"workload.frames: two blocks cannot slide {config.frames} cells each on a "
                            f"{config.grid}-cell grid without meeting; use frames <= grid - 2")
    if config.sample_steps > config.diffusion_steps:
        raise ScenarioError(f"workload.sample_steps: {config.sample_steps} exceeds diffusion_steps "
                            f"{config.diffusion_steps}")
