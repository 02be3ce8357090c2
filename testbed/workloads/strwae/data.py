"""Digits under four lighting directions: the nuisance S of the StrWAE miniature, with few labels.

Every 8x8 digit of scikit-learn is shown under each of four lights (left, right, top, bottom): the
image is multiplied by ``0.3 + 0.7 * ramp``, a linear ramp rising towards the light (an Extended
Yale B analogue). Each image appears under all four lights, so the digit Y and the light S are
independent by construction. The split keeps the four versions of a digit image on the same
side; ``labels_per_class`` training images per digit keep their label (the semi-supervised set).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.data import DATASETS

LIGHTS = ("left", "right", "top", "bottom")
NUM_LIGHTS = len(LIGHTS)


def light_ramps(size: int = 8) -> np.ndarray:
    """``(4, size, size)`` multiplicative lighting masks, brightest on the side of each light."""
    ramp = np.linspace(0.0, 1.0, size)
    towards_left = np.tile(ramp[::-1], (size, 1))
    towards_top = towards_left.T
    masks = np.stack([towards_left, towards_left[:, ::-1], towards_top, towards_top[::-1, :]])
    return 0.3 + 0.7 * masks


@dataclass(frozen=True)
class LitDigits:
    """Flattened images ``x`` (n, 64) in [0, 1], digits ``y``, lights ``s``, and which labels are seen."""

    x: np.ndarray
    y: np.ndarray
    s: np.ndarray
    labelled: np.ndarray  # bool (n,): the label may be used in training


def light_images(images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every image under every light: flattened images, the source row of each, and its light."""
    masks = light_ramps(images.shape[-1])
    lit = images[:, None, :, :] * masks[None]
    rows = np.repeat(np.arange(len(images)), NUM_LIGHTS)
    lights = np.tile(np.arange(NUM_LIGHTS), len(images))
    return lit.reshape(len(images) * NUM_LIGHTS, -1).astype(np.float32), rows, lights


def lit_digits(test_fraction: float, labels_per_class: int, rng: np.random.Generator) -> tuple[LitDigits, LitDigits]:
    """Train and test sets of lit digits; ``labels_per_class`` lit training images per digit are labelled."""
    digits = DATASETS["digits"]()
    images, labels = digits.x[:, 0], digits.y
    order = rng.permutation(len(labels))
    test_rows = order[: round(test_fraction * len(labels))]
    is_test = np.zeros(len(labels), dtype=bool)
    is_test[test_rows] = True
    x, source, lights = light_images(images)
    y = labels[source]
    split = [np.flatnonzero(~is_test[source]), np.flatnonzero(is_test[source])]
    train = LitDigits(x[split[0]], y[split[0]], lights[split[0]], np.zeros(len(split[0]), dtype=bool))
    for digit in range(10):
        candidates = np.flatnonzero(train.y == digit)
        train.labelled[rng.choice(candidates, size=min(labels_per_class, len(candidates)), replace=False)] = True
    test = LitDigits(x[split[1]], y[split[1]], lights[split[1]], np.ones(len(split[1]), dtype=bool))
    return train, test
