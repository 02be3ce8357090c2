"""The two data generators that augment the learner's replay buffer, with their training and adaptation.

``TrajectoryGenerator`` is ATraDiff: diffusers of several horizons over whole windows, a length
estimator that picks the horizon from the initial state, and the pruner that cuts at the goal.
Online adaptation fine-tunes each diffuser on recent online windows, keeping only the important
ones: those the current model denoises worst (highest loss), mixed with offline windows so it
does not forget. ``TransitionGenerator`` is the SynthER-style baseline: one diffuser over single
transitions, trained and adapted the same way.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from testbed.workloads.atradiff import diffusion
from testbed.workloads.atradiff import env as mc
from testbed.workloads.atradiff.buffer import Buffer
from testbed.workloads.atradiff.config import ATraDiffConfig
from testbed.workloads.training import optimizer_step


def task_of(config: ATraDiffConfig) -> mc.Task:
    """The goal test and training reward of a configuration."""
    return mc.Task(config.goal, config.shaping, config.gamma)


def _train(model: diffusion.VectorDenoiser, optimizer: torch.optim.Optimizer, data: torch.Tensor, steps: int,
           batch: int, generator: torch.Generator, mask: torch.Tensor | None = None) -> float:
    total = 0.0
    for _ in range(steps):
        index = torch.randint(0, len(data), (batch,), generator=generator)
        loss = diffusion.denoising_loss(model, data[index], generator, mask=mask)
        total += optimizer_step(optimizer, loss)
    return total / max(steps, 1)


def _important(model: diffusion.VectorDenoiser, candidates: torch.Tensor, keep: float, seed: int,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """The share ``keep`` of candidates with the highest denoising loss (fixed noise draws)."""
    if len(candidates) == 0:
        return candidates
    with torch.no_grad():
        losses = cast(torch.Tensor, sum(  # a sum of tensors
            diffusion.denoising_loss(model, candidates, torch.Generator().manual_seed(seed + k), reduce=False,
                                     mask=mask) for k in range(4)))
    count = max(1, int(round(keep * len(candidates))))
    return candidates[losses.argsort(descending=True)[:count]]


class TrajectoryGenerator:
    """ATraDiff's imagination: one diffuser per horizon, the length estimator and the pruner."""

    def __init__(self, offline: list[dict[str, np.ndarray]], config: ATraDiffConfig, abar: torch.Tensor):
        self.lengths = sorted(config.lengths)
        self.increments, self.task = config.increments, task_of(config) if config.relabel else None
        hidden, blocks, lr = config.hidden, config.blocks, config.diffusion_lr
        rows = [(mc.episode_rows(e), bool(e["term"][-1])) for e in offline]
        self.offline = {L: torch.from_numpy(np.concatenate([self._encode(mc.windows(r, t, L)) for r, t in rows])
                                            .reshape(-1, L * mc.CHANNELS)) for L in self.lengths}
        self.offline_states = np.concatenate([r[:-1, :2] for r, t in rows if t])
        steps_left = np.concatenate([mc.steps_to_goal(r, t) for r, t in rows if t])
        self.offline_log_steps = torch.from_numpy(np.log(steps_left))
        self.models = {L: diffusion.TemporalDenoiser(L, hidden, blocks, abar) for L in self.lengths}
        self.optimizers = {L: torch.optim.Adam(m.parameters(), lr=lr) for L, m in self.models.items()}
        self.estimator = diffusion.LengthEstimator()
        self.estimator_opt = torch.optim.Adam(self.estimator.parameters(), lr=1e-3)

    def _encode(self, windows: np.ndarray) -> np.ndarray:
        return mc.encode_windows(windows, self.increments)

    def pretrain(self, steps: int, batch: int, generator: torch.Generator) -> None:
        """Fit each diffuser to the offline windows of its horizon, and the estimator to steps-to-goal."""
        for L in self.lengths:
            _train(self.models[L], self.optimizers[L], self.offline[L], steps, batch, generator,
                   diffusion.first_state_mask(L))
        states, targets = self.offline_states, self.offline_log_steps
        for _ in range(steps):
            index = torch.randint(0, len(states), (batch,), generator=generator)
            loss = (self.estimator(states[index.numpy()]) - targets[index]).pow(2).mean()
            optimizer_step(self.estimator_opt, loss)

    def generate(self, starts: np.ndarray, sample_steps: int,
                 generator: torch.Generator) -> list[dict[str, np.ndarray]]:
        """Pruned imagined trajectories from each initial state, at the horizon the estimator picks."""
        horizon = diffusion.choose_length(self.estimator.estimate(starts), self.lengths)
        pieces: list[dict[str, np.ndarray]] = []
        for L in self.lengths:
            chosen = np.flatnonzero(horizon == L)
            if len(chosen):
                windows = diffusion.sample_trajectories(self.models[L], L, starts[chosen], sample_steps, generator,
                                                        self.increments)
                pieces += [diffusion.prune(w, self.task) for w in windows]
        return pieces

    def adapt(self, real: Buffer, episodes: int, keep: float, steps: int, batch: int, generator: torch.Generator,
              seed: int) -> None:
        """Fine-tune each diffuser on the important windows of the last ``episodes`` online episodes."""
        recent = [(real.episode_rows(a, b), t) for a, b, t in real.episodes[-episodes:]]
        for L in self.lengths:
            online = [mc.windows(r, t, L) for r, t in recent]
            online = [w for w in online if len(w)]
            if not online:
                continue
            candidates = torch.from_numpy(self._encode(np.concatenate(online)).reshape(-1, L * mc.CHANNELS))
            mask = diffusion.first_state_mask(L)
            kept = _important(self.models[L], candidates, keep, seed, mask)
            anchor = self.offline[L][torch.randint(0, len(self.offline[L]), (len(kept),), generator=generator)]
            _train(self.models[L], self.optimizers[L], torch.cat([kept, anchor]), steps, batch, generator, mask)

    def state_dict(self) -> dict[str, Any]:
        return {"models": {str(L): m.state_dict() for L, m in self.models.items()},
                "optimizers": {str(L): o.state_dict() for L, o in self.optimizers.items()},
                "estimator": self.estimator.state_dict(), "estimator_opt": self.estimator_opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for L in self.lengths:
            self.models[L].load_state_dict(state["models"][str(L)])
            self.optimizers[L].load_state_dict(state["optimizers"][str(L)])
        self.estimator.load_state_dict(state["estimator"])
        self.estimator_opt.load_state_dict(state["estimator_opt"])


class TransitionGenerator:
    """SynthER-style imagination: unconditioned diffusion over single (s, a, r, s', done) tuples."""

    DIM = 7

    def __init__(self, offline: list[dict[str, np.ndarray]], config: ATraDiffConfig, abar: torch.Tensor):
        self.offline = self.vectors(offline)
        self.task = task_of(config) if config.relabel else None
        self.model = diffusion.VectorDenoiser(self.DIM, 8 * config.hidden, config.blocks, abar)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.diffusion_lr)

    def generate(self, count: int, sample_steps: int, generator: torch.Generator) -> dict[str, np.ndarray]:
        """``count`` imagined transitions (done and reward from the goal test with ``relabel``, as ATraDiff's)."""
        flat = diffusion.ddim_sample(self.model, count, self.DIM, sample_steps, generator)
        transitions = diffusion.split_transitions(flat.numpy())
        return self.task.relabel(transitions) if self.task else transitions

    @staticmethod
    def vectors(parts: list[dict[str, np.ndarray]]) -> torch.Tensor:
        joined = {key: np.concatenate([p[key] for p in parts]) for key in ("obs", "act", "rew", "next", "term")}
        return torch.from_numpy(diffusion.transition_vectors(*joined.values()))

    def pretrain(self, steps: int, batch: int, generator: torch.Generator) -> None:
        """Fit the diffuser to the offline transitions."""
        _train(self.model, self.optimizer, self.offline, steps, batch, generator)

    def adapt(self, real: Buffer, episodes: int, keep: float, steps: int, batch: int, generator: torch.Generator,
              seed: int) -> None:
        """Fine-tune on the important transitions of the last ``episodes`` online episodes."""
        if not real.episodes:
            return
        first = real.episodes[-episodes:][0][0]
        end = real.episodes[-1][1]
        recent = {key: real.data[key][first:end].numpy() for key in ("obs", "act", "rew", "next", "term")}
        kept = _important(self.model, self.vectors([recent]), keep, seed)
        anchor = self.offline[torch.randint(0, len(self.offline), (len(kept),), generator=generator)]
        _train(self.model, self.optimizer, torch.cat([kept, anchor]), steps, batch, generator)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
