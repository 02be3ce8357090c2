"""Partitioner ``round_robin``: sample i goes to client i mod N (the order of the training split)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from testbed.data.partition import Partitioner


class RoundRobinPartition(Partitioner):
    """Example plugin: sample i of the training split goes to client i mod N; no randomness."""

    type: Literal["round_robin"] = "round_robin"

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return [np.arange(client, len(labels), num_clients, dtype=np.int64) for client in range(num_clients)]
