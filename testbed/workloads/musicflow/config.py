"""The typed config of the MusicFlow workload and its check, free of torch so that validating a
scenario does not import the model code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

FRAMES = 32  # frames of a clip: 8192 samples at a hop of 256 (`testbed.workloads.musicflow.data`)


class MusicFlowConfig(StrictModel):
    """Data sizes, the two flow networks, the masked objective and the samplers."""

    variant: Literal["musicflow", "nomask", "single"] = "musicflow"
    train_clips: int = Field(1200, ge=64, description="synthetic training clips (1.024 s, 32 frames)")
    test_clips: int = Field(256, ge=16, description="held-out clips for every metric")
    hidden: int = Field(64, gt=0)
    layers: int = Field(2, gt=0, description="transformer layers per stage (single: twice as many)")
    heads: int = Field(4, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(64, gt=0)
    sigma_min: float = Field(1e-4, ge=0, lt=1)
    full_mask_prob: float = Field(0.3, ge=0, le=1, description="share of training masks covering every frame")
    span_min: float = Field(0.7, gt=0, le=1, description="shortest random span, as a share of the frames")
    text_dropout: float = Field(0.1, ge=0, lt=1, description="share of training texts dropped (for guidance)")
    guidance: float = Field(1.0, ge=0, description="classifier-free guidance scale on the text")
    sample_steps: int = Field(16, gt=0, description="Euler steps per stage for generation and infilling")
    fd_steps: list[int] = Field(default_factory=lambda: [2, 4, 8, 16], description="steps for the FD-vs-steps curve")
    infill_fraction: float = Field(0.3, gt=0, lt=1, description="middle share of the frames to infill")
    infill_draws: int = Field(4, ge=1, description="infilled draws per clip: the FD is their mean, the MSE the best")


def check(config: MusicFlowConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    if config.batch_size > config.train_clips:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_clips {config.train_clips}")
    if config.hidden % config.heads:
        raise ScenarioError(f"workload.heads: {config.heads} does not divide hidden {config.hidden}")
    if not 1 <= round(config.infill_fraction * FRAMES) <= FRAMES - 2:
        raise ScenarioError(f"workload.infill_fraction: {config.infill_fraction} leaves no frame to infill "
                            f"or no context on both sides of the {FRAMES} frames")
    if not config.fd_steps or min(config.fd_steps) < 1:
        raise ScenarioError(f"workload.fd_steps: {config.fd_steps} must be a non-empty list of positive steps")
