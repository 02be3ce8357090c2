"""A small soft actor-critic (Haarnoja et al. 2018) for one-dimensional actions: the online learner.

Tanh-squashed Gaussian policy, twin Q networks with Polyak-averaged targets, and the temperature
tuned to a target entropy of -1 (minus the action dimension). Observations are scaled by the
environment's fixed scales inside the networks.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from testbed.workloads.atradiff.env import CENTER, SCALE
from testbed.workloads.training import optimizer_step

OBS_CENTER, OBS_SCALE = torch.from_numpy(CENTER[:2]), torch.from_numpy(SCALE[:2])


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, outputs))


class SAC(nn.Module):
    """Actor, twin critics, target critics and log-temperature, with one optimizer per part."""

    TARGET_ENTROPY = -1.0  # minus the action dimension

    def __init__(self, hidden: int, lr: float, gamma: float, tau: float):
        super().__init__()
        self.gamma, self.tau = gamma, tau
        self.actor = mlp(2, hidden, 2)
        self.critics = nn.ModuleList([mlp(3, hidden, 1), mlp(3, hidden, 1)])
        self.targets = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.zeros(()))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critics.parameters(), lr=lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=lr)

    def policy(self, obs: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """A squashed action and its log-probability; the mean action when ``generator`` is None."""
        mean, log_std = self.actor((obs - OBS_CENTER) / OBS_SCALE).chunk(2, dim=1)
        log_std = log_std.clamp(-5, 2)
        if generator is None:
            return torch.tanh(mean), torch.zeros_like(mean)
        noise = torch.randn(mean.shape, generator=generator)
        raw = mean + log_std.exp() * noise
        action = torch.tanh(raw)
        log_prob = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)) - torch.log(1 - action**2 + 1e-6)
        return action, log_prob

    def act(self, obs: np.ndarray, generator: torch.Generator | None) -> float:
        with torch.no_grad():
            return float(self.policy(torch.from_numpy(obs[None].astype(np.float32)), generator)[0])

    def q_values(self, critics: nn.ModuleList, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([(obs - OBS_CENTER) / OBS_SCALE, act], 1)
        return torch.cat([critic(x) for critic in critics], 1)

    def update(self, batch: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, float]:
        """One gradient step of critics, actor and temperature on ``batch``."""
        obs, act, rew, nxt, term = (batch[k] for k in ("obs", "act", "rew", "next", "term"))
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_act, next_logp = self.policy(nxt, generator)
            next_q = self.q_values(self.targets, nxt, next_act).min(1, keepdim=True).values - alpha * next_logp
            target = rew[:, None] + self.gamma * (1 - term[:, None]) * next_q
        critic_loss = (self.q_values(self.critics, obs, act[:, None]) - target).pow(2).mean()
        optimizer_step(self.critic_opt, critic_loss)
        new_act, logp = self.policy(obs, generator)
        actor_loss = (alpha * logp - self.q_values(self.critics, obs, new_act).min(1, keepdim=True).values).mean()
        optimizer_step(self.actor_opt, actor_loss)
        # d/d log_alpha = entropy - target: the temperature falls while the policy's entropy exceeds the
        # target (-1). A target of +1 is above the log 2 any action distribution on [-1, 1] can reach:
        # the temperature would grow without end.
        alpha_loss = -(self.log_alpha * (logp.detach() + self.TARGET_ENTROPY)).mean()
        optimizer_step(self.alpha_opt, alpha_loss)
        with torch.no_grad():
            for target_p, p in zip(self.targets.parameters(), self.critics.parameters()):
                target_p.lerp_(p, self.tau)
        return {"critic_loss": critic_loss.item(), "alpha": float(alpha)}

    def optimizer_states(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in ("actor_opt", "critic_opt", "alpha_opt")}

    def load_optimizer_states(self, states: dict) -> None:
        for name, state in states.items():
            getattr(self, name).load_state_dict(state)
