"""One root seed for every random generator of a run.

Streams are derived by *name* rather than by spawn order (``SeedTree(7).numpy("data.split")``), so
adding a new consumer of randomness never shifts the numbers another consumer sees. Each name is
hashed into numpy's ``SeedSequence`` spawn key, which gives statistically independent streams.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def _name_key(name: str) -> tuple[int, ...]:
    digest = hashlib.sha256(name.encode()).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


class SeedTree:
    """Derives independent, reproducible random streams from one root seed."""

    def __init__(self, root: int, path: tuple[int, ...] = ()):
        self.root = int(root)
        self._path = path

    def child(self, name: str) -> SeedTree:
        """A sub-tree for one component, e.g. ``seeds.child("client.3")``."""
        return SeedTree(self.root, self._path + _name_key(name))

    def sequence(self, name: str) -> np.random.SeedSequence:
        """The numpy SeedSequence of stream ``name``."""
        return np.random.SeedSequence(self.root, spawn_key=self._path + _name_key(name))

    def numpy(self, name: str) -> np.random.Generator:
        """A numpy Generator for stream ``name``."""
        return np.random.default_rng(self.sequence(name))

    def integer(self, name: str) -> int:
        """A 31-bit integer seed for libraries that take an int (scikit-learn, torch.manual_seed)."""
        return int(self.sequence(name).generate_state(1)[0] & 0x7FFFFFFF)

    def torch(self, name: str) -> torch.Generator:
        """A CPU torch Generator for stream ``name``."""
        generator = torch.Generator()
        generator.manual_seed(self.integer(name))
        return generator
