"""ATraDiff as a scenario workload (Yang, Wang, ICML 2024): imagined trajectories in an online learner's buffer.

``variant: atradiff`` pretrains trajectory diffusers of several horizons, a length estimator and
uses the pruner on the offline data of a scripted policy, then augments SAC's replay buffer with
trajectories imagined from states the learner visited; with ``adapt: true`` the diffusers are
fine-tuned on important online windows as the learner's data shifts. ``variant: synther``
augments with single imagined transitions (SynthER-style); ``variant: rlpd`` fills the same share
of every batch with the offline transitions themselves (RLPD's symmetric sampling, so that a
gain of ATraDiff is more than "offline data help"); ``variant: sac`` is the learner alone.
Imagined data get their done flag and reward from the environment's goal test (``relabel``).
One training step is one environment step (with one SAC update); the diffusers are pretrained
inside the first call of ``train``. The environment is gymnasium's
MountainCarContinuous-v0, so ``data.dataset`` is ignored.

Example: ``testbed run scenarios/workloads/atradiff.yaml --set workload.variant=sac``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data.config import DataConfig
from testbed.seeding import SeedTree
from testbed.workloads.atradiff import diffusion
from testbed.workloads.atradiff import env as mc
from testbed.workloads.atradiff.buffer import Buffer, mixed_batch
from testbed.workloads.atradiff.config import ATraDiffConfig, check
from testbed.workloads.atradiff.generators import TrajectoryGenerator, TransitionGenerator, task_of
from testbed.workloads.atradiff.learner import OnlineLoop
from testbed.workloads.atradiff.report import SECTIONS
from testbed.workloads.base import Workload


class ATraDiffWorkload(Workload):
    """SAC whose replay buffer is augmented with imagined trajectories, against SynthER-style tuples and SAC alone."""

    name = "atradiff"
    Config = ATraDiffConfig
    config: ATraDiffConfig
    check = staticmethod(check)
    headline_metric = ("test_return", "max")
    report_sections = SECTIONS

    def __init__(self, config: ATraDiffConfig, data: DataConfig, seeds: SeedTree):
        super().__init__(config, data, seeds)
        collected = mc.collect_offline(config.offline_episodes, config.policy_noise, config.offline_power,
                                       seeds.numpy("data.offline"), config.goal)
        self.offline = [task_of(config).shaped(e) for e in collected]  # rewards as the learner's own
        abar = diffusion.alpha_bars(config.diffusion_steps)
        with torch.random.fork_rng():
            torch.manual_seed(seeds.integer("model.init"))
            self.generator = self._build_generator(abar)
            self.loop = OnlineLoop(config, seeds)
        self.synthetic = Buffer(config.synthetic_capacity)
        if config.variant == "rlpd":  # RLPD's symmetric sampling: the same offline data the diffusers learn from
            self.synthetic.add({k: np.concatenate([e[k] for e in self.offline]) for k in ("obs", "act", "rew", "next",
                                                                                          "term")})
        self.gen_rng = seeds.torch("generate")
        self.pretrained = False
        self.eval_starts = self._eval_starts(seeds.numpy("eval.starts"))
        self.first_solved: int | None = None
        self.test_history: list[float] = []
        self.last_round_error = float("nan")

    def _build_generator(self, abar: torch.Tensor) -> TrajectoryGenerator | TransitionGenerator | None:
        c = self.config
        if c.variant == "atradiff":
            return TrajectoryGenerator(self.offline, c, abar)
        if c.variant == "synther":
            return TransitionGenerator(self.offline, c, abar)
        return None

    def _eval_starts(self, rng: np.random.Generator) -> np.ndarray:
        """Fixed states to imagine from at evaluation: states the offline episodes visited."""
        states = np.concatenate([e["obs"] for e in self.offline])
        return states[rng.choice(len(states), size=32, replace=False)]

    def build_model(self) -> torch.nn.Module:
        return self.loop.agent

    def train(self, steps: int) -> dict[str, float]:
        c = self.config
        if self.generator is not None and not self.pretrained:
            self.generator.pretrain(c.pretrain_steps, c.diffusion_batch, self.gen_rng)
            self.pretrained = True
        losses = []
        for _ in range(steps):
            self.loop.env_step()
            step = self.loop.env_steps
            if step > c.warmup_steps:
                batch = mixed_batch(self.loop.real, self.synthetic, c.batch_size, c.synthetic_ratio, self.loop.rng)
                batch["rew"] = batch["rew"] * c.reward_scale
                losses.append(self.loop.agent.update(batch, self.loop.rng)["critic_loss"])
            if self.generator is not None and step >= c.warmup_steps and step % c.generate_every == 0:
                self._imagine()
            if self.generator is not None and c.adapt and step % c.adapt_every == 0 and self.loop.real.episodes:
                self.generator.adapt(self.loop.real, c.adapt_episodes, c.adapt_keep, c.adapt_steps, c.diffusion_batch,
                                     self.gen_rng, self.seeds.integer(f"adapt.{step}"))
        return {"critic_loss": float(np.mean(losses)) if losses else 0.0,
                "train_episode_return": self.loop.recent_return()}

    def _imagine(self) -> None:
        """One round of imagination into the synthetic buffer."""
        assert self.generator is not None  # called only for the variants with a generator
        c = self.config
        if isinstance(self.generator, TrajectoryGenerator):
            real = self.loop.real
            index = torch.randint(0, real.size, (c.generate_count,), generator=self.gen_rng)
            starts = real.data["obs"][index].numpy()
            pieces = [p for p in self.generator.generate(starts, c.sample_steps, self.gen_rng) if len(p["act"])]
            joined = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]} if pieces else None
        else:
            joined = self.generator.generate(c.generate_count * 48, c.sample_steps, self.gen_rng)
        if joined is not None:
            joined["act"] = np.clip(joined["act"], -1, 1)
            self.synthetic.add(joined)
            self.last_round_error = mc.consistency_error(joined["obs"], joined["act"], joined["next"], c.power)

    def imagined_for_evaluation(self) -> dict[str, Any]:
        """Imagined data from fixed starts and noise, for the dynamics and length metrics."""
        assert self.generator is not None  # called only for the variants with a generator
        generator = self.seeds.torch("eval.imagine")
        if isinstance(self.generator, TrajectoryGenerator):
            pieces = self.generator.generate(self.eval_starts, self.config.sample_steps, generator)
            joined = {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
            return {"pieces": pieces, "joined": joined}
        return {"pieces": [], "joined": self.generator.generate(512, self.config.sample_steps, generator)}

    def evaluate(self) -> dict[str, float]:
        c = self.config
        returns = self.loop.test_returns()
        mean_return = float(np.mean(returns))
        if self.first_solved is None and mean_return >= c.return_threshold:
            self.first_solved = self.loop.env_steps
        self.test_history.append(mean_return)
        # the mean over every evaluation so far: the area under the learning curve, which rewards learning sooner
        metrics = {"test_return": mean_return, "test_return_auc": float(np.mean(self.test_history)),
                   "test_success": float(np.mean(np.array(returns) > 0)),
                   "test_steps_to_threshold": float(self.first_solved or self.loop.env_steps),
                   "test_solved": float(self.first_solved is not None)}
        if self.generator is not None and self.pretrained:
            metrics.update(self._generator_metrics())
        return metrics

    def _generator_metrics(self) -> dict[str, float]:
        imagined = self.imagined_for_evaluation()
        joined = imagined["joined"]
        metrics = {"test_dynamics_error": mc.consistency_error(joined["obs"], joined["act"], joined["next"],
                                                               self.config.power)}
        if imagined["pieces"]:
            ends = [p["term"][-1] > 0 if len(p["term"]) else False for p in imagined["pieces"]]
            metrics["test_goal_fraction"] = float(np.mean(ends))
        if not np.isnan(self.last_round_error):  # the latest imagination round, from the learner's own states
            metrics["test_online_dynamics_error"] = self.last_round_error
        return metrics

    def artifacts(self) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {"episode_returns": np.array(self.loop.episode_returns, dtype=np.float64),
                                         "episode_ends": np.array(self.loop.episode_ends, dtype=np.int64)}
        offline = self.offline[:8]
        arrays["offline_paths"] = _padded([np.concatenate([e["obs"], e["next"][-1:]]) for e in offline])
        if self.generator is not None and self.pretrained:
            imagined = self.imagined_for_evaluation()
            joined = imagined["joined"]
            true_next = mc.dynamics(joined["obs"], joined["act"], self.config.power)
            arrays["step_errors"] = np.linalg.norm((joined["next"] - true_next) / mc.SCALE[:2], axis=-1)
            # the real step from the same (s, a): the unit of `test_dynamics_error`
            arrays["step_changes"] = np.linalg.norm((true_next - joined["obs"]) / mc.SCALE[:2], axis=-1)
            if imagined["pieces"]:
                arrays["imagined_paths"] = _padded([np.concatenate([p["obs"], p["next"][-1:]]) if len(p["act"])
                                                    else np.zeros((0, 2)) for p in imagined["pieces"]])
        return arrays

    def state_dict(self) -> dict[str, Any]:
        return {"loop": self.loop.state_dict(), "synthetic": self.synthetic.state_dict(),
                "generator": self.generator.state_dict() if self.generator is not None else None,
                "gen_rng": self.gen_rng.get_state(), "pretrained": self.pretrained,
                "first_solved": self.first_solved, "test_history": list(self.test_history),
                "last_round_error": self.last_round_error}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loop.load_state_dict(state["loop"])
        self.synthetic.load_state_dict(state["synthetic"])
        if self.generator is not None:
            self.generator.load_state_dict(state["generator"])
        self.gen_rng.set_state(state["gen_rng"])
        self.pretrained, self.first_solved = state["pretrained"], state["first_solved"]
        self.test_history = [float(r) for r in state["test_history"]]
        self.last_round_error = state["last_round_error"]


def _padded(paths: list[np.ndarray]) -> np.ndarray:
    """Paths of different lengths ``[n_i, 2]`` in one array ``[n, max, 2]`` padded with NaN."""
    longest = max([len(p) for p in paths] + [1])
    out = np.full((len(paths), longest, 2), np.nan)
    for row, path in enumerate(paths):
        out[row, : len(path)] = path
    return out
