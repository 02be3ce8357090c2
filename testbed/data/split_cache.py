"""The stratified train/test split's indices, kept on disk so that a process that only needs them
need not import scikit-learn to draw them again.

Every Flower client actor (one per CPU of a simulation) loads and splits the data the driver
already split; scikit-learn's ``train_test_split`` is exact and well kept, but its import takes
about 1.2 CPU s (pandas and scipy.stats come with it), more than the actor's training at test
size. The first process to split a dataset (the driver, or `testbed validate`) writes the two index
arrays here; the others read them back in a millisecond.

An entry is keyed by the labels' bytes, the test fraction, the seed and the installed versions of
scikit-learn and numpy (which draw the split), and is checked on read to be a partition of the
samples (else drawn again and rewritten). It lives in the testbed's ``splits`` cache
(`testbed.cache`); ``TESTBED_SPLIT_CACHE=off`` turns it off, for one command or a shell: the split
is the same either way.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import numpy as np

SWITCH_ENV = "TESTBED_SPLIT_CACHE"
# The distributions whose versions can change the split drawn for the same labels and seed.
SPLIT_LIBRARIES = ("scikit-learn", "numpy")
_ENTRY = {"train": ("int64", None), "test": ("int64", None)}


def stratified_indices(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and test indices of scikit-learn's stratified split of labels ``y`` holding out
    ``test_fraction`` with ``seed``: read from the cache, else drawn and kept."""
    path = _entry(y, test_fraction, seed)
    found = _read(path, len(y)) if path is not None else None
    if found is None:
        found = _drawn(y, test_fraction, seed)
        if path is not None:
            from testbed.cache import write_arrays

            write_arrays(path, {"train": found[0], "test": found[1]})
    return found


def _drawn(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(len(y), dtype=np.int64), test_size=test_fraction,
                                   random_state=seed, stratify=y)
    return train, test


def _entry(y: np.ndarray, test_fraction: float, seed: int) -> Path | None:
    from testbed.cache import cache_root

    root = cache_root("splits", SWITCH_ENV)
    if root is None:
        return None
    labels = np.ascontiguousarray(y)
    digest = hashlib.sha256(f"{labels.dtype.str}{labels.shape}".encode() + labels.tobytes())
    key = {"labels": digest.hexdigest(), "test_fraction": float(test_fraction), "seed": int(seed),
           "libraries": _libraries()}
    return root / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]}.npz"


@cache
def _libraries() -> str:
    from testbed.cache import source_digest

    return source_digest((), SPLIT_LIBRARIES)


def _read(path: Path, samples: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The entry at ``path`` when it is a partition of ``samples`` samples; None when it is absent,
    damaged or not one (then drawn again)."""
    from testbed.cache import read_arrays

    arrays = read_arrays(path, _ENTRY)
    if arrays is None:
        return None
    train, test = arrays["train"], arrays["test"]
    both = np.concatenate([train, test])
    if len(both) != samples or (both.size and (both.min() < 0 or both.max() >= samples)):
        return None
    if both.size and np.bincount(both, minlength=samples).max() != 1:
        return None
    return train, test
