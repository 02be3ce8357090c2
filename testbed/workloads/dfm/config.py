"""Typed config of the ``dfm`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

MAX_VALID = 20000  # the exact denoiser enumerates the valid set


class DFMConfig(StrictModel):
    """Task, variant, data rules, network and samplers of the DFM workload."""

    task: Literal["sequence", "codesign"] = "sequence"
    variant: Literal["dfm", "d3pm"] = "dfm"
    vocab: int = Field(4, ge=2, description="sequence task: alphabet size")
    length: int = Field(12, ge=2, description="sequence task: tokens per sequence")
    residues: int = Field(12, ge=2, description="codesign task: residues per chain")
    turn_degrees: float = Field(40.0, gt=0, lt=180, description="codesign: heading change of a left/right residue")
    stay_prob: float = Field(0.7, ge=0, le=1, description="codesign: probability a residue repeats the previous type")
    coord_noise: float = Field(0.05, ge=0, description="codesign: std of the noise on the folded coordinates")
    rmsd_threshold: float = Field(0.5, gt=0, description="codesign: consistency threshold, in bond lengths")
    fold_prop: float = Field(0.1, ge=0, le=0.5, description="codesign: share of folding and of inverse-folding items")
    train_size: int = Field(4000, gt=0)
    hidden: int = Field(256, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(256, gt=0)
    sample_steps: int = Field(16, ge=1, description="steps of every sampler (the D3PM's T)")
    eta: float = Field(2.0, ge=0, description="CTMC stochasticity of the DFM sampler")
    invariance_eta: float = Field(5.0, ge=0, description="the large eta compared with eta = 0")
    invariance_steps: int = Field(1024, ge=2, description="Euler steps of the eta-invariance comparison")
    eval_samples: int = Field(1000, ge=10)
    ce_weight: float = Field(0.01, ge=0, description="D3PM: lambda of the auxiliary cross-entropy")


def valid_count(vocab: int, length: int) -> int:
    """Number of non-decreasing sequences: ``C(length + vocab - 1, vocab - 1)``."""
    return math.comb(length + vocab - 1, vocab - 1)


def check(config: DFMConfig, data: DataConfig) -> None:
    """D3PM is the sequence task's baseline; the valid set, the invariance grid and the batch must fit."""
    if config.variant == "d3pm" and config.task != "sequence":
        raise ScenarioError("workload.variant: 'd3pm' is the baseline of task 'sequence' only")
    if config.task == "sequence" and valid_count(config.vocab, config.length) > MAX_VALID:
        raise ScenarioError(f"workload.length: vocab {config.vocab} and length {config.length} give more than "
                            f"{MAX_VALID} valid sequences; use a shorter length or a smaller vocab")
    if config.invariance_eta / config.invariance_steps > 0.5:
        raise ScenarioError("workload.invariance_steps: too few for invariance_eta (need eta * dt <= 0.5)")
    if config.batch_size > config.train_size:
        raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_size {config.train_size}")
