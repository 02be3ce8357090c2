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

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.dfm import codesign as chains
from testbed.workloads.dfm import ctmc
from testbed.workloads.dfm import sequences as seqs
from testbed.workloads.dfm.config import DFMConfig, check
from testbed.workloads.dfm.metrics import codesign_artifacts, codesign_metrics, sequence_artifacts, sequence_metrics
from testbed.workloads.dfm.models import JointNet, SequenceDenoiser
from testbed.workloads.dfm.report import SECTIONS
from testbed.workloads.training import optimizer_step


class DFMWorkload(Workload):
    """Masking discrete flow (and D3PM) on rule-bound sequences; mini-Multiflow co-design of chains."""

    name = "dfm"
    Config = DFMConfig
    config: DFMConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "train_rng", "steps_done")
    headline_metric = ("test_validity", "max")
    report_sections = SECTIONS

    def __init__(self, config: DFMConfig, data: DataConfig, seeds: SeedTree):
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
            total += optimizer_step(self.optimizer, loss)
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
        assert isinstance(self.model, JointNet)  # the codesign task's model
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
