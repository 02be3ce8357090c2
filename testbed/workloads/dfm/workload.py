"""Discrete Flow Models as a scenario workload (Campbell, Yim et al., ICML 2024).

``task: sequence`` trains a denoiser on non-decreasing token sequences; ``variant: dfm`` is the
masking DFM (CE on masked tokens, continuous t; CTMC sampler with the eta knob) and
``variant: d3pm`` the absorbing discrete diffusion baseline with ``sample_steps`` = T steps.
``task: codesign`` trains the mini-Multiflow joint model on 2-D chains and their turn
sequences. Both tasks use synthetic data, so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/dfm.yaml --no-sweep --set workload.variant=d3pm``.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from testbed.errors import ScenarioError
from testbed.scenario import DataConfig, StrictModel
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload, register
from testbed.workloads.dfm import codesign as chains
from testbed.workloads.dfm import ctmc
from testbed.workloads.dfm import sequences as seqs
from testbed.workloads.dfm.evaluation import (
    codesign_artifacts, codesign_metrics, sequence_artifacts, sequence_metrics,
)
from testbed.workloads.dfm.models import JointNet, SequenceDenoiser
from testbed.workloads.dfm.report import SECTIONS

MAX_VALID = 20000  # the exact denoiser enumerates the valid set


class DfmConfig(StrictModel):
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


@register
class DiscreteFlow(Workload):
    """Masking discrete flow (and D3PM) on rule-bound sequences; mini-Multiflow co-design of chains."""

    name = "dfm"
    Config = DfmConfig
    checkpointed = ("model", "optimizer", "train_rng", "steps_done")
    summary = "discrete flow models (CTMC, eta-invariant sampler) vs D3PM; Multiflow-style co-design of 2-D chains"
    headline_metric = ("test_validity", "max")
    report_sections = SECTIONS

    @classmethod
    def check(cls, config: DfmConfig, data: DataConfig) -> None:
        if config.variant == "d3pm" and config.task != "sequence":
            raise ScenarioError("workload.variant: 'd3pm' is the baseline of task 'sequence' only")
        if config.task == "sequence" and seqs.valid_count(config.vocab, config.length) > MAX_VALID:
            raise ScenarioError(f"workload.length: vocab {config.vocab} and length {config.length} give more than "
                                f"{MAX_VALID} valid sequences; use a shorter length or a smaller vocab")
        if config.invariance_eta / config.invariance_steps > 0.5:
            raise ScenarioError("workload.invariance_steps: too few for invariance_eta (need eta * dt <= 0.5)")
        if config.batch_size > config.train_size:
            raise ScenarioError(f"workload.batch_size: {config.batch_size} exceeds train_size {config.train_size}")

    def __init__(self, config: DfmConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        if config.task == "sequence":
            self.valid = seqs.valid_sequences(config.vocab, config.length)
            self.train_x = seqs.sample_data(self.valid, config.train_size, seeds.torch("data.train"))
            self.eval_x = seqs.sample_data(self.valid, config.eval_samples, seeds.torch("data.eval"))
        else:
            turn = math.radians(config.turn_degrees)
            self.train_seq, self.train_coords = self._chains(config.train_size, turn, seeds.torch("data.train"))
            self.eval_seq, self.eval_coords = self._chains(config.eval_samples, turn, seeds.torch("data.eval"))
            self.scale = float(self.train_coords.std())  # the flow runs on unit-scale coordinates
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.train_rng = seeds.torch("train")
        self.steps_done = 0

    def _chains(self, count: int, turn: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        seq = chains.sample_sequences(count, self.config.residues, self.config.stay_prob, generator)
        coords = chains.fold(seq, turn) + self.config.coord_noise * torch.randn(count, self.config.residues + 1, 2,
                                                                                 generator=generator)
        return seq, coords - coords.mean(1, keepdim=True)

    def build_model(self) -> torch.nn.Module:
        if self.config.task == "sequence":
            return SequenceDenoiser(self.config.vocab, self.config.length, self.config.hidden)
        return JointNet(3, self.config.residues, self.config.hidden)

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        total = 0.0
        for _ in range(steps):
            loss = self._sequence_loss() if self.config.task == "sequence" else self._codesign_loss()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            self.steps_done += 1
        return {"train_loss": total / steps}

    def _sequence_loss(self) -> torch.Tensor:
        config, generator = self.config, self.train_rng
        x1 = self.train_x[torch.randint(0, len(self.train_x), (config.batch_size,), generator=generator)]
        if config.variant == "dfm":
            t = torch.rand(config.batch_size, generator=generator)
            x_t = ctmc.corrupt(x1, t, config.vocab, generator)
            return ctmc.dfm_loss(self.model(x_t, t), x1, x_t, config.vocab)
        k = torch.randint(1, config.sample_steps + 1, (config.batch_size,), generator=generator)
        t = 1.0 - k / config.sample_steps  # D3PM step k masks a share k / T of the tokens
        x_t = ctmc.corrupt(x1, t, config.vocab, generator)
        return ctmc.d3pm_loss(self.model(x_t, t), x1, x_t, k, config.sample_steps, config.vocab, config.ce_weight)

    def _codesign_loss(self) -> torch.Tensor:
        batch = torch.randint(0, len(self.train_seq), (self.config.batch_size,), generator=self.train_rng)
        return chains.joint_loss(self.model, self.train_coords[batch] / self.scale, self.train_seq[batch],
                                 self.config.fold_prop, self.train_rng)

    def evaluate(self) -> dict[str, float]:
        self.model.eval()
        generator = self.seeds.torch("eval")  # the same draws at every evaluation, independent of training
        if self.config.task == "sequence":
            metrics = sequence_metrics(self.model, self.config, self.eval_x, generator)
        else:
            metrics = codesign_metrics(self.model, self.config, self.scale, self.eval_seq, self.eval_coords, generator)
        return {f"test_{key}": value for key, value in metrics.items()}

    def artifacts(self) -> dict[str, np.ndarray]:
        self.model.eval()
        generator = self.seeds.torch("eval.artifacts")
        if self.config.task == "sequence":
            return sequence_artifacts(self.model, self.config, self.valid, self.eval_x, generator)
        return codesign_artifacts(self.model, self.config, self.scale, self.eval_seq, self.eval_coords, generator)
