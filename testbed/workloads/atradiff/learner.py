"""The online side of the ATraDiff miniature: SAC acting in the environment, its real replay buffer,
episode bookkeeping and the deterministic test episodes.

Every random draw comes from named streams of the run's seed tree (resets are seeded per episode
index), and the environment's physical state is saved, so a resumed run continues bit-exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.seeding import SeedTree
from testbed.workloads.atradiff import env as mc
from testbed.workloads.atradiff.buffer import Buffer
from testbed.workloads.atradiff.sac import SAC


class OnlineLoop:
    """One SAC learner interacting with MountainCarContinuous, one environment step at a time."""

    def __init__(self, config: Any, seeds: SeedTree):
        self.config, self.seeds = config, seeds
        self.env = mc.make_env(config.power, config.goal)
        self.task = mc.Task(config.goal, config.shaping, config.gamma)
        self.agent = SAC(config.sac_hidden, config.sac_lr, config.gamma, config.tau)
        self.real = Buffer(config.buffer_capacity)
        self.rng = seeds.torch("learner")
        self.env_steps, self.episodes = 0, 0
        self.obs: np.ndarray | None = None
        self.episode_first, self.episode_steps, self.episode_return = 0, 0, 0.0
        self.episode_returns: list[float] = []
        self.episode_ends: list[int] = []

    def env_step(self) -> None:
        """Act once (uniformly at random during warm-up), store the transition, handle the episode's end."""
        if self.obs is None:
            self.obs, _ = self.env.reset(seed=self.seeds.integer(f"env.reset.{self.episodes}"))
            self.episode_first, self.episode_steps, self.episode_return = self.real.cursor, 0, 0.0
        if self.env_steps < self.config.warmup_steps:
            action = float(torch.rand((), generator=self.rng) * 2 - 1)
        else:
            action = self.agent.act(self.obs, self.rng)
        nxt, reward, terminated, _, _ = self.env.step(np.array([action], dtype=np.float32))
        learned = float(reward) + float(self.task.bonus(self.obs, nxt))  # the test return stays gymnasium's
        self.real.add({"obs": self.obs[None], "act": [action], "rew": [learned], "next": nxt[None],
                       "term": [float(terminated)]})
        self.obs = nxt
        self.env_steps += 1
        self.episode_steps += 1
        self.episode_return += float(reward)
        if terminated or self.episode_steps >= mc.MAX_STEPS:
            if self.real.cursor > self.episode_first:  # the ring did not wrap inside this episode
                self.real.end_episode(self.episode_first, self.real.cursor, bool(terminated))
            self.episode_returns.append(self.episode_return)
            self.episode_ends.append(self.env_steps)
            self.episodes += 1
            self.obs = None

    def recent_return(self) -> float:
        """Mean return of the last five finished training episodes (0 before the first ends)."""
        return float(np.mean(self.episode_returns[-5:])) if self.episode_returns else 0.0

    def test_returns(self) -> list[float]:
        """Returns of the deterministic (mean-action) policy on fixed test starts."""
        env = mc.make_env(self.config.power, self.config.goal)
        returns = []
        for episode in range(self.config.eval_episodes):
            seed = self.seeds.integer(f"eval.reset.{episode}")
            rollout = mc.run_episode(env, seed, lambda s: self.agent.act(s, None))
            returns.append(float(rollout["rew"].sum()))
        return returns

    def state_dict(self) -> dict[str, Any]:
        physical = (None if self.obs is None  # gymnasium types unwrapped as Env, not Continuous_MountainCarEnv
                    else torch.from_numpy(np.array(self.env.unwrapped.state).copy()))  # type: ignore[attr-defined]
        return {"agent": self.agent.state_dict(), "agent_opt": self.agent.optimizer_states(),
                "real": self.real.state_dict(), "rng": self.rng.get_state(), "env_steps": self.env_steps,
                "episodes": self.episodes, "obs": None if self.obs is None else torch.from_numpy(self.obs.copy()),
                "physical": physical, "episode": [self.episode_first, self.episode_steps, self.episode_return],
                "episode_returns": list(self.episode_returns), "episode_ends": list(self.episode_ends)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.agent.load_optimizer_states(state["agent_opt"])
        self.real.load_state_dict(state["real"])
        self.rng.set_state(state["rng"])
        self.env_steps, self.episodes = state["env_steps"], state["episodes"]
        self.obs = None if state["obs"] is None else state["obs"].numpy().copy()
        if state["physical"] is not None:
            # gymnasium types unwrapped as Env, not Continuous_MountainCarEnv
            self.env.unwrapped.state = state["physical"].numpy().copy()  # type: ignore[attr-defined]
        first, steps, ret = state["episode"]
        self.episode_first, self.episode_steps, self.episode_return = int(first), int(steps), float(ret)
        self.episode_returns = [float(r) for r in state["episode_returns"]]
        self.episode_ends = [int(e) for e in state["episode_ends"]]
