"""The environment side of the ATraDiff miniature: gymnasium's MountainCarContinuous-v0, its dynamics
in closed form, the scripted policy that collects the offline data, and trajectory windows.

The sparse reward (+100 at the flag, -0.1 a^2 per step) makes it a classic exploration failure
for SAC, which is where imagined goal-reaching trajectories should help most. A trajectory window
is ``length`` rows of ``[pos, vel, action, reward, done]``: row t holds the state s_t, the action
taken there, its reward, and whether s_t is already terminal; after the goal the terminal state
repeats with zero action and reward (an absorbing state), so every window has the same shape.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from testbed.workloads.atradiff.config import MAX_STEPS

ENV_ID = "MountainCarContinuous-v0"
GOAL = 0.45
CHANNELS = 5  # pos, vel, action, reward, done
REWARD = 3  # the reward channel, modelled in symlog units (see ``normalise``)
# Fixed affine scales to bring every channel near [-1, 1] for the diffusion models; the reward's
# scale is symlog(100), so the goal reward maps to 1.
CENTER = np.array([-0.3, 0.0, 0.0, 0.0, 0.5], dtype=np.float32)
SCALE = np.array([0.9, 0.07, 1.0, np.log1p(100.0), 0.5], dtype=np.float32)


def make_env(power: float) -> gym.Env:
    """The unwrapped environment (no time limit: episodes are cut at ``MAX_STEPS`` by the caller)."""
    env = gym.make(ENV_ID).unwrapped
    env.power = power  # type: ignore[attr-defined]  # gymnasium types unwrapped as Env, not the car
    return env


def dynamics(states: np.ndarray, actions: np.ndarray, power: float) -> np.ndarray:
    """s_{t+1} = f(s_t, a_t) of MountainCarContinuous for ``states [..., 2]``, ``actions [...]``."""
    pos, vel = states[..., 0], states[..., 1]
    force = np.clip(actions, -1.0, 1.0)
    vel = np.clip(vel + force * power - 0.0025 * np.cos(3 * pos), -0.07, 0.07)
    pos = np.clip(pos + vel, -1.2, 0.6)
    vel = np.where((pos <= -1.2) & (vel < 0), 0.0, vel)
    return np.stack([pos, vel], -1)


def consistency_error(states: np.ndarray, actions: np.ndarray, next_states: np.ndarray, power: float) -> float:
    """Mean one-step dynamics error relative to the mean one-step change: mean |s' - f(s, a)| / mean |s' - s|.

    Each state coordinate is divided by its scale (``SCALE``) first so position and velocity weigh
    alike; 0 means the transitions obey the environment exactly.
    """
    if len(states) == 0:
        return float("nan")
    scale = SCALE[:2]
    error = np.linalg.norm((next_states - dynamics(states, actions, power)) / scale, axis=-1)
    change = np.linalg.norm((next_states - states) / scale, axis=-1)
    return float(error.mean() / max(change.mean(), 1e-12))


def scripted_action(state: np.ndarray, noise: float, rng: np.random.Generator) -> float:
    """Energy pumping: push along the velocity (a random side at rest), plus Gaussian noise."""
    direction = np.sign(state[1]) if abs(state[1]) > 1e-6 else rng.choice([-1.0, 1.0])
    return float(np.clip(direction + noise * rng.normal(), -1.0, 1.0))


def run_episode(env: gym.Env, seed: int, policy, max_steps: int = MAX_STEPS) -> dict[str, np.ndarray]:
    """One episode from ``env.reset(seed=seed)`` under ``policy(state) -> action``, as arrays."""
    state, _ = env.reset(seed=seed)
    rows: dict[str, list] = {"obs": [], "act": [], "rew": [], "next": [], "term": []}
    for _ in range(max_steps):
        action = policy(state)
        next_state, reward, terminated, _, _ = env.step(np.array([action], dtype=np.float32))
        for key, value in zip(rows, (state, action, reward, next_state, terminated)):
            rows[key].append(value)
        state = next_state
        if terminated:
            break
    return {key: np.asarray(value, dtype=np.float32) for key, value in rows.items()}


def collect_offline(episodes: int, noise: float, power: float, rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """The offline data set: ``episodes`` episodes of the noisy scripted policy."""
    env = make_env(power)
    seeds = rng.integers(0, 2**31 - 1, size=episodes)
    return [run_episode(env, int(seed), lambda s: scripted_action(s, noise, rng)) for seed in seeds]


def episode_rows(episode: dict[str, np.ndarray]) -> np.ndarray:
    """An episode as rows ``[steps + 1, CHANNELS]`` (raw units), ending with its last state."""
    steps = len(episode["act"])
    rows = np.zeros((steps + 1, CHANNELS), dtype=np.float32)
    rows[:steps, :2], rows[steps, :2] = episode["obs"], episode["next"][-1]
    rows[:steps, 2], rows[:steps, 3] = episode["act"], episode["rew"]
    rows[steps, 4] = float(episode["term"][-1])
    return rows


def windows(rows: np.ndarray, terminal: bool, length: int) -> np.ndarray:
    """Every window ``[count, length, CHANNELS]`` of an episode's rows, padded with the absorbing state.

    Windows that would run past the end of an episode that did not terminate are left out.
    """
    if terminal:
        pad = np.repeat(rows[-1:], length, 0)
        pad[:, 2:4] = 0.0
        rows = np.concatenate([rows, pad[:-1]])
    count = len(rows) - length + 1
    if count <= 0:
        return np.zeros((0, length, CHANNELS), dtype=np.float32)
    index = np.arange(count)[:, None] + np.arange(length)[None]
    return rows[index]


def steps_to_goal(rows: np.ndarray, terminal: bool) -> np.ndarray:
    """For each state of an episode that reached the goal, the steps still needed to reach it."""
    if not terminal:
        return np.zeros(0, dtype=np.float32)
    return np.arange(len(rows) - 1, 0, -1, dtype=np.float32)


def normalise(rows: np.ndarray) -> np.ndarray:
    """Raw rows to the diffusers' units; the reward goes through symlog first.

    symlog (sign(r) log(1 + |r|), as DreamerV3 uses for rewards) because the reward is -0.1 a^2
    on every step and +100 once: on a linear scale the step costs are 1e-3 of the channel, so a
    diffuser's residual noise of a few hundredths would read as rewards of several units.
    """
    rows = rows.copy()
    rows[..., REWARD] = np.sign(rows[..., REWARD]) * np.log1p(np.abs(rows[..., REWARD]))
    return (rows - CENTER) / SCALE


def denormalise(rows: np.ndarray) -> np.ndarray:
    rows = rows * SCALE + CENTER
    rows[..., REWARD] = np.sign(rows[..., REWARD]) * np.expm1(np.abs(rows[..., REWARD]))
    return rows
