"""Typed config of the ``dddm`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig


class DDDMConfig(StrictModel):
    """Data, network, metric and samplers of the DDDM workload."""

    variant: Literal["dddm", "ddim"] = "dddm"
    conditioning: Literal["self", "buffer"] = Field(
        "self", description="dddm: the condition from the same x_t in a gradient-free first pass (self), or a "
                            "per-sample buffer of earlier estimates (buffer: leaks the target; kept as an ablation)")
    guide_weight: float | Literal["inverse_epoch"] = Field(
        1.0, description="dddm: w of w d(f, x_0) + (1 - w) d(f, x0_hat), in (0, 1]; inverse_epoch: the released "
                         "code's w = 1 / (epoch + 1)")
    dataset: Literal["gaussians", "digits"] = Field(
        "gaussians", description="eight 2-D Gaussians, or the bundled digits on the workload's own 75/25 split")
    train_size: int = Field(2000, gt=0, description="gaussians: training points (= buffer slots)")
    diffusion_steps: int = Field(1000, ge=2, description="T of the discrete VP diffusion")
    hidden: int = Field(256, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(256, gt=0)
    loss: Literal["pseudo_huber", "pseudo_lpips"] = "pseudo_huber"
    metric_c: float = Field(0.03, gt=0, description="c of the Pseudo-Huber / Pseudo-LPIPS metric")
    sample_steps: list[int] = Field(default_factory=lambda: [1, 2, 4, 16, 64],
                                    description="function evaluations at which samples are measured")
    eval_samples: int = Field(1000, ge=10)


def check(config: DDDMConfig, data: DataConfig) -> None:
    """Samples are measured after 1 and 2 steps at least; Pseudo-LPIPS needs digits; the batch must fit."""
    if not {1, 2} <= set(config.sample_steps) or min(config.sample_steps) < 1:
        raise ScenarioError(f"workload.sample_steps: {config.sample_steps} must be positive and include 1 and 2")
    if config.loss == "pseudo_lpips" and config.dataset != "digits":
        raise ScenarioError("workload.loss: pseudo_lpips needs image features; use dataset: digits")
    if not isinstance(config.guide_weight, str) and not 0 < config.guide_weight <= 1:
        raise ScenarioError(f"workload.guide_weight: {config.guide_weight} must lie in (0, 1] or be inverse_epoch")
    if config.dataset == "gaussians" and config.batch_size > config.train_size:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_size {config.train_size}")
