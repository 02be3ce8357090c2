"""Moving digits: scikit-learn's 8x8 digit sprites bouncing on a small canvas, and a delayed-recall task.

`moving_digits` stands in for Moving-MNIST, the STC paper's main benchmark: one sprite per
sequence moving with a constant velocity that reflects off the canvas walls, so every frame holds
the same sprite (its pixel mass is conserved). The sequences are registered as the bundled
dataset ``moving_digits`` in `testbed.data.DATASETS` (by this module, when the workloads import),
labelled with the digit, so that federated scenarios can give each client different digits.

`recall_batch` builds the delayed-recall probe of the temporal pathway: a frame is shown at
t = 0, blank frames follow, a uniform cue frame is shown at t = ``delay``, and the network must
output the first frame at the cue.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits

from testbed.data import DATASETS, Dataset

CANVAS = 16
SPRITE = 8
FRAMES = 10  # frames per registered sequence (input + future)
DATA_SEED = 2024  # the registered dataset is fixed: its trajectories never depend on a run's seed
CUE_LEVEL = 0.5


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


def _moving_digits() -> Dataset:
    """The registered dataset: every digit image of scikit-learn as one 10-frame sequence."""
    bunch = load_digits()
    sprites = (bunch.images / 16.0).astype(np.float32)
    sequences = moving_sequences(sprites, FRAMES, np.random.default_rng(DATA_SEED))
    return Dataset("moving_digits", sequences, bunch.target.astype(np.int64), 10, (FRAMES, CANVAS, CANVAS))


DATASETS.setdefault("moving_digits", _moving_digits)


def recall_batch(first_frames: torch.Tensor, delay: int) -> torch.Tensor:
    """Inputs ``[B, delay + 1, H, W]``: the frame at t = 0, blanks, and the uniform cue at t = ``delay``."""
    batch, height, width = first_frames.shape
    inputs = torch.zeros(batch, delay + 1, height, width)
    inputs[:, 0] = first_frames
    inputs[:, delay] = CUE_LEVEL
    return inputs
