"""The environment side of the ATraDiff miniature: gymnasium's MountainCarContinuous-v0, its dynamics
in closed form, the goal test and training reward (``Task``, used to relabel imagined data), the
scripted policy that collects the offline data, and trajectory windows with their model encoding
(absolute states or state increments).

The sparse reward (+100 at the flag, -0.1 a^2 per step) makes it a classic exploration failure
for SAC, which is where imagined goal-reaching trajectories should help most; ``Task.shaping``
adds a potential-based energy term for the learner so that SAC alone can get there at CPU budget. A trajectory window
is ``length`` rows of ``[pos, vel, action, reward, done]``: row t holds the state s_t, the action
taken there, its reward, and whether s_t is already terminal; after the goal the terminal state
repeats with zero action and reward (an absorbing state), so every window has the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass

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
# Largest one-step change of (position, velocity): the speed limit, and power + gravity (0.0015 + 0.0025).
DELTA_SCALE = np.array([0.07, 0.004], dtype=np.float32)


def make_env(power: float, goal: float = GOAL) -> gym.Env:
    """The unwrapped environment (no time limit: episodes are cut at ``MAX_STEPS`` by the caller), with the
    flag at position ``goal`` (gymnasium's is 0.45; the episode ends there with +100 once the velocity is >= 0)."""
    env = gym.make(ENV_ID).unwrapped
    env.power = power  # type: ignore[attr-defined]  # gymnasium types unwrapped as Env, not the car
    env.goal_position = goal  # type: ignore[attr-defined]
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
    """Mean one-step dynamics error in units of a real step: mean |s' - f(s, a)| / mean |f(s, a) - s|.

    The denominator is the step the environment itself takes from the same (s, a), not the imagined
    step |s' - s|: a generator whose steps are ten times too long would otherwise score about 0.9
    ("as far off as one step") while being nine real steps off. Each state coordinate is divided by
    its scale (``SCALE``) first so position and velocity weigh alike; 0 means the transitions obey
    the environment exactly, 1 that they are off by as much as one real step.
    """
    if len(states) == 0:
        return float("nan")
    scale = SCALE[:2]
    true_next = dynamics(states, actions, power)
    error = np.linalg.norm((next_states - true_next) / scale, axis=-1)
    change = np.linalg.norm((true_next - states) / scale, axis=-1)
    return float(error.mean() / max(change.mean(), 1e-12))


def energy(states: np.ndarray) -> np.ndarray:
    """Mechanical energy of ``states [..., 2]``: 0 at rest in the valley, about 1 at rest at the flag.

    The dynamics are v' = v + a power - 0.0025 cos(3 p), so the height is U(p) = 0.0025 / 3 sin(3 p);
    E = v^2 / 2 + U(p) - U(valley), divided by the height of the hills (2 x 0.0025 / 3).
    """
    pos, vel = states[..., 0], states[..., 1]
    return (0.5 * vel**2 + 0.0025 / 3 * (np.sin(3 * pos) + 1)) / (2 * 0.0025 / 3)


@dataclass(frozen=True)
class Task:
    """The goal test and the reward the learner is trained on.

    gymnasium's reward is +100 on the step that reaches the flag (position >= ``goal``, velocity
    >= 0) and -0.1 a^2 on every step. ``shaping`` adds the potential-based term
    gamma Phi(s') - Phi(s) with Phi = shaping x ``energy`` (Ng, Harada, Russell 1999: it leaves the
    optimal policies unchanged), which rewards pumping energy into the car; 0 is the sparse task.
    Test returns are always gymnasium's own reward.
    """

    goal: float = GOAL
    shaping: float = 0.0
    gamma: float = 0.99

    def at_goal(self, states: np.ndarray) -> np.ndarray:
        """gymnasium's goal test for ``states [..., 2]``."""
        return (states[..., 0] >= self.goal) & (states[..., 1] >= 0.0)

    def bonus(self, states: np.ndarray, next_states: np.ndarray) -> np.ndarray:
        """The shaping term gamma Phi(s') - Phi(s) (0 for the sparse task)."""
        if self.shaping == 0:
            return np.zeros(states.shape[:-1], dtype=np.float32)
        return (self.shaping * (self.gamma * energy(next_states) - energy(states))).astype(np.float32)

    def reward(self, states: np.ndarray, actions: np.ndarray, next_states: np.ndarray,
               terminal: np.ndarray) -> np.ndarray:
        """gymnasium's reward plus the shaping term."""
        sparse = 100.0 * terminal - 0.1 * np.clip(actions, -1.0, 1.0) ** 2
        return (sparse + self.bonus(states, next_states)).astype(np.float32)

    def relabel(self, transitions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Imagined transitions with the done flag and reward the environment would give them.

        The diffusers under-generate the rare +100 (about 8 on the terminal rows of pruned
        trajectories), so a critic trained on their own reward channel hardly sees the goal; the goal
        test and the reward function are known closed forms of the task, so they replace the channels.
        """
        terminal = self.at_goal(transitions["next"]).astype(np.float32)
        rewards = self.reward(transitions["obs"], transitions["act"], transitions["next"], terminal)
        return {**transitions, "term": terminal, "rew": rewards}

    def shaped(self, episode: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A real episode's transitions with the shaping term added to gymnasium's reward."""
        return {**episode, "rew": (episode["rew"] + self.bonus(episode["obs"], episode["next"])).astype(np.float32)}


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


def collect_offline(episodes: int, noise: float, power: float, rng: np.random.Generator,
                    goal: float = GOAL) -> list[dict[str, np.ndarray]]:
    """The offline data set: ``episodes`` episodes of the noisy scripted policy."""
    env = make_env(power, goal)
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


def encode_windows(windows: np.ndarray, increments: bool) -> np.ndarray:
    """Raw windows ``[..., L, CHANNELS]`` to the diffusers' units.

    With ``increments`` every state after the first is replaced by its increment s_t - s_{t-1},
    scaled by the largest real step (``DELTA_SCALE``): a real step is 1/25 of the position's range,
    so on absolute states the diffuser's residual noise is as large as the step it should model,
    while increments put the step itself at unit scale. The first state stays absolute (it is the
    condition the window is inpainted from).
    """
    out = normalise(windows)
    if increments:
        deltas = np.diff(windows[..., :2], axis=-2)
        out[..., 1:, :2] = deltas / DELTA_SCALE
    return out.astype(np.float32)


def decode_windows(model_rows: np.ndarray, increments: bool) -> np.ndarray:
    """The inverse of ``encode_windows``: states are the first state plus the cumulated increments."""
    raw = denormalise(model_rows)
    if increments:
        deltas = model_rows[..., 1:, :2] * DELTA_SCALE
        raw[..., 1:, :2] = raw[..., :1, :2] + np.cumsum(deltas, axis=-2)
    return raw
