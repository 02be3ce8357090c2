"""RoboDreamer as a scenario workload (Zhou, Du, Chen, Li, Yeung, Gan, ICML 2024).

``variant: compositional`` parses each two-clause instruction into its clauses and trains one
video diffusion model on random subsets of those components (Eq. 4); it generates with the
averaged component scores (Eq. 1, Alg. 2). ``variant: monolithic`` is the paper's "w/o" ablation:
the same network and text encoder conditioned on the whole sentence. ``goal_image: true`` adds the
final frame as one more factor (Eqs. 5-6). The videos come from the workload's own grid world
(``world.py``), so ``data.dataset`` is ignored. A share of the combinations of two moves is never
shown in training (every single move is); success on those unseen combinations is the headline.

Example: ``testbed run scenarios/workloads/robodreamer.yaml --set workload.variant=monolithic``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.base import Workload
from testbed.workloads.robodreamer import model as diffusion
from testbed.workloads.robodreamer import world
from testbed.workloads.robodreamer.config import RoboDreamerConfig, check
from testbed.workloads.robodreamer.report import SECTIONS
from testbed.workloads.training import optimizer_step

COMBOS = world.combinations()
PHRASE_LENGTH = 16  # the longest sentence of the grammar has 15 words


class RoboDreamerWorkload(Workload):
    """Compositional (parsed, score-averaged) text-to-video diffusion against the sentence-conditioned model."""

    name = "robodreamer"
    Config = RoboDreamerConfig
    config: RoboDreamerConfig
    check = staticmethod(check)
    checkpointed = ("model", "optimizer", "data_rng", "train_rng", "steps_done")
    headline_metric = ("test_success_unseen", "max")
    report_sections = SECTIONS

    def __init__(self, config: RoboDreamerConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        split_rng = seeds.numpy("data.held_out")
        self.held_out = world.held_out_combinations(config.held_out_share, split_rng)
        self.seen = [combo for combo in COMBOS if combo not in self.held_out]
        # Evaluate every unseen combination and as many seen ones, each on ``eval_per_combo`` scenes.
        shown_seen = [self.seen[i] for i in sorted(split_rng.choice(len(self.seen), len(self.held_out), replace=False))]
        self.eval_combos = sorted(self.held_out) + shown_seen
        self.abar = diffusion.alpha_bars(config.diffusion_steps)
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.model = self.build_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.data_rng = seeds.numpy("data.train")
        self.train_rng = seeds.torch("train")
        self.eval_set = self._scenes(self.eval_combos, config.eval_per_combo, seeds.numpy("data.eval"))
        self.steps_done = 0

    def build_model(self) -> diffusion.VideoDenoiser:
        c = self.config
        return diffusion.VideoDenoiser(c.grid, c.frames, c.channels, c.embed, c.blocks, self.abar)

    def _scenes(self, combos: list, per_combo: int, rng: np.random.Generator) -> dict[str, Any]:
        """``per_combo`` scenes of each combination: instructions, start cells and ground-truth videos."""
        return self._render([combo for combo in combos for _ in range(per_combo)], rng)

    def _render(self, combos: list, rng: np.random.Generator) -> dict[str, Any]:
        """Scenes for combinations of moves, each clause with a random verb."""
        grid, frames = self.config.grid, self.config.frames
        cells = [world.sample_layout(list(combo), grid, frames, rng) for combo in combos]
        videos = np.stack([world.video(cell, list(combo), frames, grid) for cell, combo in zip(cells, combos)])
        clauses = [[(int(rng.integers(len(world.VERBS))), c, d) for c, d in combo] for combo in combos]
        return {"combos": combos, "cells": cells, "video": torch.from_numpy(videos),
                "sentences": [world.instruction(c) for c in clauses]}

    def components(self, sentences: list[str], video: torch.Tensor) -> torch.Tensor:
        """Each sample's component embeddings ``[B, K, E]``: parsed phrases (or the sentence), then the goal."""
        phrases = [world.parse(s) if self.config.variant == "compositional" else [s] for s in sentences]
        count = len(phrases[0])
        ids = world.tokens([p for group in phrases for p in group], PHRASE_LENGTH)
        conds = self.model.text(ids).reshape(len(sentences), count, -1)
        if self.config.goal_image:
            goal = self.model.goal(video[:, -1].reshape(len(video), -1))
            conds = torch.cat([conds, goal[:, None]], 1)
        return conds

    def train(self, steps: int) -> dict[str, float]:
        self.model.train()
        total = 0.0
        for _ in range(steps):
            combos = [self.seen[i] for i in self.data_rng.integers(len(self.seen), size=self.config.batch_size)]
            batch = self._render(combos, self.data_rng)
            video = batch["video"]
            conds = self.components(batch["sentences"], video)
            loss = diffusion.training_loss(self.model, video[:, 1:], video[:, 0], conds, self.abar,
                                           self.config.p_uncond, self.train_rng)
            total += optimizer_step(self.optimizer, loss)
            self.steps_done += 1
        return {"train_loss": total / steps}

    def generate(self) -> torch.Tensor:
        """Videos for every evaluation scene, from the same noise at every evaluation ``[B, F, 3, G, G]``."""
        self.model.eval()
        video = self.eval_set["video"]
        with torch.no_grad():
            conds = self.components(self.eval_set["sentences"], video)
        return diffusion.sample(self.model, video[:, 0], conds, self.abar, self.config.guidance,
                                self.config.sample_steps, self.seeds.torch("eval.noise"))

    def scene_success(self, generated: torch.Tensor) -> np.ndarray:
        """1/0 task success of each evaluation scene."""
        return np.array([world.succeeded(video, cells, list(combo)) for video, cells, combo
                         in zip(generated.numpy(), self.eval_set["cells"], self.eval_set["combos"])], dtype=float)

    def unseen_rows(self) -> np.ndarray:
        return np.array([combo in self.held_out for combo in self.eval_set["combos"]])

    def evaluate(self) -> dict[str, float]:
        generated = self.generate()
        success, unseen = self.scene_success(generated), self.unseen_rows()
        error = (generated - self.eval_set["video"][:, 1:]).pow(2).flatten(1).mean(1).numpy()
        return {"test_success_unseen": float(success[unseen].mean()),
                "test_success_seen": float(success[~unseen].mean()),
                "test_mse_unseen": float(error[unseen].mean()), "test_mse_seen": float(error[~unseen].mean())}

    def artifacts(self) -> dict[str, np.ndarray]:
        generated = self.generate()
        per = self.config.eval_per_combo
        success = self.scene_success(generated).reshape(len(self.eval_combos), per).mean(1)
        shown = np.arange(4) * per  # the first scene of the first four unseen combinations
        return {"combo_success": success, "combo_moves": np.array([[*m, *n] for m, n in self.eval_combos]),
                "combo_unseen": np.array([combo in self.held_out for combo in self.eval_combos]),
                "example_first": self.eval_set["video"][shown, 0].numpy(),
                "example_generated": generated[shown].numpy(),
                "example_truth": self.eval_set["video"][shown, 1:].numpy(),
                "example_moves": np.array([[*m, *n] for m, n in self.eval_combos[:4]])}
