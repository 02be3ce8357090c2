"""Moving digits: scikit-learn's 8x8 digit sprites bouncing on a small canvas.

`moving_digits` stands in for Moving-MNIST (the STC workload's benchmark): one sprite per
sequence moving with a constant velocity that reflects off the canvas walls, so every frame holds
the same sprite (its pixel mass is conserved). It is the bundled dataset ``moving_digits`` of
`testbed.data.DATASETS`, labelled with the digit, so that federated scenarios can give each client
different digits (`testbed.data.datasets` makes the `Dataset` of `digit_sequences`). The
trajectories are fixed (``DATA_SEED``): they never depend on a run's seed.
"""

from __future__ import annotations

import numpy as np

CANVAS = 16
SPRITE = 8
FRAMES = 10  # frames per sequence (input + future)
DATA_SEED = 2024  # the dataset is fixed: its trajectories never depend on a run's seed


def bounce(start: np.ndarray, velocity: np.ndarray, frames: int, limit: int) -> np.ndarray:
    """Integer positions ``[frames, 2]`` of a point moving at ``velocity`` and reflecting off 0 and ``limit``."""
    positions = np.empty((frames, 2), dtype=np.int64)
    position, speed = start.astype(np.int64).copy(), velocity.astype(np.int64).copy()
    for t in range(frames):
        positions[t] = position
        step = position + speed
        for axis in range(2):
            if not 0 <= step[axis] <= limit:  # reflect off the wall
                speed[axis] = -speed[axis]
                step[axis] = position[axis] + speed[axis]
        position = step
    return positions


def render(sprite: np.ndarray, positions: np.ndarray, canvas: int = CANVAS) -> np.ndarray:
    """Frames ``[len(positions), canvas, canvas]`` with ``sprite`` pasted at each (row, column)."""
    size = sprite.shape[0]
    frames = np.zeros((len(positions), canvas, canvas), dtype=np.float32)
    for t, (row, column) in enumerate(positions):
        frames[t, row : row + size, column : column + size] = sprite
    return frames


def moving_sequences(sprites: np.ndarray, frames: int, rng: np.random.Generator) -> np.ndarray:
    """One bouncing sequence per sprite: ``[len(sprites), frames, CANVAS, CANVAS]`` in [0, 1]."""
    limit = CANVAS - SPRITE
    out = np.empty((len(sprites), frames, CANVAS, CANVAS), dtype=np.float32)
    for i, sprite in enumerate(sprites):
        start = rng.integers(0, limit + 1, size=2)
        velocity = rng.choice([-2, -1, 1, 2], size=2)
        out[i] = render(sprite, bounce(start, velocity, frames, limit))
    return out


def digit_sequences() -> tuple[np.ndarray, np.ndarray]:
    """Every digit image of scikit-learn as one ``FRAMES``-frame sequence, and its digit."""
    from sklearn.datasets import load_digits  # imported on use, like the other bundled loaders

    bunch = load_digits()
    sprites = (bunch.images / 16.0).astype(np.float32)
    return moving_sequences(sprites, FRAMES, np.random.default_rng(DATA_SEED)), bunch.target.astype(np.int64)
