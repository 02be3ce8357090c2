"""Replay buffers of the ATraDiff miniature: the real (online) buffer and the synthetic one.

Both hold transitions (s, a, r, s', terminal) in preallocated torch tensors so that their whole
content is part of a checkpoint. The real buffer also remembers where each finished episode
starts and ends, so that online trajectories can be cut into windows for the diffusers'
adaptation; the synthetic buffer is a ring that forgets its oldest imagined transitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import numpy as np
import torch

KEYS = ("obs", "act", "rew", "next", "term")


class Buffer:
    """Transitions in tensors of fixed ``capacity``; when full, the oldest are overwritten."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.data = {"obs": torch.zeros(capacity, 2), "act": torch.zeros(capacity), "rew": torch.zeros(capacity),
                     "next": torch.zeros(capacity, 2), "term": torch.zeros(capacity)}
        self.size, self.cursor = 0, 0
        self.episodes: list[tuple[int, int, bool]] = []  # (first index, end index, reached the goal)

    def add(self, transitions: Mapping[str, np.ndarray | Sequence[SupportsFloat]]) -> None:
        """Append a batch of transitions (arrays keyed like ``KEYS``)."""
        count = len(transitions["act"])
        index = (self.cursor + np.arange(count)) % self.capacity
        for key in KEYS:
            self.data[key][torch.from_numpy(index)] = torch.as_tensor(np.asarray(transitions[key], dtype=np.float32))
        self.cursor = int((self.cursor + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)

    def end_episode(self, first: int, end: int, reached: bool) -> None:
        """Record a finished episode stored at indices ``first..end-1`` (no wrap-around)."""
        self.episodes.append((first, end, reached))

    def sample(self, count: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        index = torch.randint(0, self.size, (count,), generator=generator)
        return {key: value[index] for key, value in self.data.items()}

    def episode_rows(self, first: int, end: int) -> np.ndarray:
        """A stored episode as rows ``[steps + 1, 5]``: (pos, vel, action, reward, done), ending in its last state."""
        steps = end - first
        rows = np.zeros((steps + 1, 5), dtype=np.float32)
        rows[:steps, :2] = self.data["obs"][first:end].numpy()
        rows[steps, :2] = self.data["next"][end - 1].numpy()
        rows[:steps, 2] = self.data["act"][first:end].numpy()
        rows[:steps, 3] = self.data["rew"][first:end].numpy()
        rows[steps, 4] = float(self.data["term"][end - 1])
        return rows

    def state_dict(self) -> dict[str, Any]:
        return {"data": {k: v.clone() for k, v in self.data.items()}, "size": self.size, "cursor": self.cursor,
                "episodes": [list(e) for e in self.episodes]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.data = {k: v.clone() for k, v in state["data"].items()}
        self.size, self.cursor = state["size"], state["cursor"]
        self.episodes = [(int(a), int(b), bool(c)) for a, b, c in state["episodes"]]


def mixed_batch(real: Buffer, synthetic: Buffer, size: int, ratio: float,
                generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``size`` transitions, a share ``ratio`` of them imagined (none while the synthetic buffer is empty)."""
    imagined = int(round(size * ratio)) if synthetic.size > 0 else 0
    parts = [real.sample(size - imagined, generator)]
    if imagined:
        parts.append(synthetic.sample(imagined, generator))
    return {key: torch.cat([part[key] for part in parts]) for key in KEYS}
