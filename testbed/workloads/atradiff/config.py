"""The typed config of the ATraDiff workload and its check, free of torch so that validating a scenario
does not import the model code or the environment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

MAX_STEPS = 999  # steps of an episode (MountainCarContinuous-v0's time limit; `testbed.workloads.atradiff.env`)


class ATraDiffConfig(StrictModel):
    """Offline data, generators, augmentation and learner of the ATraDiff workload."""

    variant: Literal["atradiff", "synther", "sac", "rlpd"] = "atradiff"
    offline_episodes: int = Field(60, gt=0, description="episodes of the noisy scripted policy")
    policy_noise: float = Field(0.5, ge=0, description="std of the scripted policy's action noise")
    power: float = Field(0.0015, gt=0, description="engine power of the online environment")
    goal: float = Field(0.45, ge=-0.3, le=0.55, description="position of the flag (gymnasium's: 0.45)")
    shaping: float = Field(0.0, ge=0, description="potential-based shaping: this x the car's energy (0: sparse)")
    offline_power: float = Field(0.0015, gt=0, description="engine power when the offline data were collected")
    lengths: list[int] = Field(default_factory=lambda: [24, 48, 96], description="horizons of the diffusers")
    diffusion_steps: int = Field(100, ge=2)
    sample_steps: int = Field(20, ge=1, description="DDIM steps when imagining")
    hidden: int = Field(32, gt=0, description="channels of the trajectory diffusers (SynthER MLP: 8x this width)")
    blocks: int = Field(2, ge=1)
    pretrain_steps: int = Field(600, ge=0, description="gradient steps of each diffuser on the offline data")
    diffusion_batch: int = Field(64, gt=0)
    diffusion_lr: float = Field(1e-3, gt=0)
    generate_every: int = Field(500, gt=0, description="environment steps between imagination rounds")
    generate_count: int = Field(24, gt=0, description="trajectories per round (SynthER: 48 transitions each)")
    synthetic_ratio: float = Field(0.5, ge=0, lt=1, description="share of imagined (rlpd: offline) transitions "
                                   "in a batch")
    synthetic_capacity: int = Field(20000, gt=0)
    increments: bool = Field(True, description="trajectory diffusers model state increments, not absolute states")
    relabel: bool = Field(True, description="done and reward of imagined data from the environment's goal test")
    adapt: bool = Field(True, description="fine-tune the generators on online data (ATraDiff's adaptation)")
    adapt_every: int = Field(1000, gt=0)
    adapt_steps: int = Field(50, ge=0)
    adapt_episodes: int = Field(5, gt=0, description="recent online episodes the adaptation looks at")
    adapt_keep: float = Field(0.5, gt=0, le=1, description="share of online windows kept (highest loss)")
    sac_hidden: int = Field(64, gt=0)
    sac_lr: float = Field(1e-3, gt=0)
    gamma: float = Field(0.99, gt=0, lt=1)
    tau: float = Field(0.01, gt=0, le=1)
    batch_size: int = Field(128, gt=0)
    warmup_steps: int = Field(500, ge=0, description="uniformly random actions before SAC acts")
    reward_scale: float = Field(0.1, gt=0)
    eval_episodes: int = Field(3, gt=0)
    return_threshold: float = Field(80.0, description="test return that counts as solved")
    buffer_capacity: int = Field(50000, gt=0)


def check(config: ATraDiffConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    if not config.lengths or min(config.lengths) < 2 or len(set(config.lengths)) != len(config.lengths):
        raise ScenarioError(f"workload.lengths: {config.lengths} must be distinct horizons of at least 2 steps")
    if max(config.lengths) > MAX_STEPS:
        raise ScenarioError(f"workload.lengths: {max(config.lengths)} is longer than an episode ({MAX_STEPS})")
    if config.sample_steps > config.diffusion_steps:
        raise ScenarioError(f"workload.sample_steps: {config.sample_steps} exceeds diffusion_steps "
                            f"{config.diffusion_steps}")
