"""What a scenario's checks read of its data without loading it: the training split's labels and shapes.

`testbed validate` checks that a federation's partition can be made (every client gets its
samples, a class for each shard) and that a backdoor's target is a class of the data and its
trigger fits the images. Both need only the training split's labels, in the split's order (the
partition draws from them), and a few facts (classes, one sample's shape): `split_metadata`.

For a bundled dataset (`testbed.data.datasets.BUNDLED_SIZES`) these facts are cached as a small
``.npz`` in the testbed's ``labels`` cache (`testbed.cache`), keyed by the data block, the test
fraction, the split's seed, the source code of `testbed.data` and the versions of the libraries its
loaders read: once cached, a check loads neither the data nor scikit-learn (whose import alone is
about 190 MB), and numpy reads the labels back in a millisecond. The first check of a key loads the
data and splits it exactly as a run does, then writes the entry (`testbed.cache.write_arrays`). A
file dataset is never cached (the file may change under the same name): it is loaded, as its own
check (`check_file_dataset`) loads it. ``TESTBED_LABEL_CACHE=off`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

SWITCH_ENV = "TESTBED_LABEL_CACHE"
# The distributions whose versions can change what a bundled dataset's loader returns.
LOADER_LIBRARIES = ("numpy", "scikit-learn", "scipy", "matplotlib", "pillow")


@dataclass(frozen=True)
class SplitMetadata:
    """The training split of a dataset as a check sees it: labels (and owners) in the split's order,
    its classes, one sample's shape and its bytes (float32 features, as `train_test_split` leaves
    them), and its largest feature value (a backdoor trigger's default value)."""

    y: np.ndarray
    groups: np.ndarray | None
    num_classes: int
    sample_shape: tuple[int, ...]
    sample_bytes: int
    image_shape: tuple[int, ...] | None
    x_max: float


def split_metadata(data: Any, test_fraction: float, seed: int) -> SplitMetadata:
    """The training split's metadata of ``data`` (a ``data:`` block) split with ``seed``; cached for
    a bundled dataset. Raises what loading and splitting raise (`ScenarioError`, `PartitionError`)."""
    from testbed.data.datasets import BUNDLED_SIZES

    path = _entry(data, test_fraction, seed) if data.dataset in BUNDLED_SIZES else None
    found = _read(path) if path is not None else None
    if found is None:
        found = _computed(data, test_fraction, seed)
        if path is not None:
            _write(path, found)
    return found


def _computed(data: Any, test_fraction: float, seed: int) -> SplitMetadata:
    """Load and split the data as a run does (`testbed.data.datasets.train_test_split`), keeping the metadata."""
    from testbed.data.datasets import train_test_split
    from testbed.data.select import load_selected

    train, _ = train_test_split(load_selected(data), test_fraction, seed)
    per_sample = train.x.nbytes // len(train.y) if len(train.y) else 0
    groups = train.groups.astype(np.int64) if train.groups is not None else None
    return SplitMetadata(train.y.astype(np.int64), groups, train.num_classes, tuple(int(s) for s in train.x.shape[1:]),
                         int(per_sample), train.image_shape, float(train.x.max()) if train.x.size else float("nan"))


def _entry(data: Any, test_fraction: float, seed: int) -> Path | None:
    from testbed.cache import cache_root

    root = cache_root("labels", SWITCH_ENV)
    if root is None:
        return None
    key = {"data": data.model_dump(mode="json"), "test_fraction": test_fraction, "seed": int(seed),
           "code": _code_digest()}
    return root / f"{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]}.npz"


@cache
def _code_digest() -> str:
    """What the bundled loaders and the split are made of: this package's source and the versions of
    the libraries they read (an edit or an upgrade of either starts new entries)."""
    from testbed.cache import source_digest

    return source_digest(Path(__file__).parent.glob("*.py"), LOADER_LIBRARIES)


# The arrays of an entry: (dtype, shape) as `testbed.cache.read_arrays` checks them (None: any length).
_ENTRY = {"y": ("int64", None), "groups": ("int64", None), "has_groups": ("bool", ()), "num_classes": ("int64", ()),
          "sample_shape": ("int64", None), "sample_bytes": ("int64", ()), "image_shape": ("int64", None),
          "x_max": ("float64", ())}


def _read(path: Path) -> SplitMetadata | None:
    """The entry at ``path``; None when it is absent, damaged or of another layout (then rebuilt).
    Kept in memory once read: the variants of a sweep share a few entries (arrays read-only)."""
    found = _read_once(path)
    if found is None:
        _read_once.cache_clear()  # a miss is not kept: the entry is written next
    return found


@lru_cache(maxsize=8)
def _read_once(path: Path) -> SplitMetadata | None:
    from testbed.cache import read_arrays

    arrays = read_arrays(path, _ENTRY)
    if arrays is None:
        return None
    for array in arrays.values():
        array.setflags(write=False)
    image_shape = tuple(int(s) for s in arrays["image_shape"])
    return SplitMetadata(arrays["y"], arrays["groups"] if bool(arrays["has_groups"]) else None,
                         int(arrays["num_classes"]), tuple(int(s) for s in arrays["sample_shape"]),
                         int(arrays["sample_bytes"]), image_shape or None, float(arrays["x_max"]))


def _write(path: Path, found: SplitMetadata) -> None:
    """Keep the entry (atomically; a folder that cannot be written costs the next check the load again)."""
    from testbed.cache import write_arrays

    write_arrays(path, {
        "y": found.y, "groups": found.groups if found.groups is not None else np.zeros(0, np.int64),
        "has_groups": np.array(found.groups is not None), "num_classes": np.array(found.num_classes, np.int64),
        "sample_shape": np.array(found.sample_shape, np.int64), "sample_bytes": np.array(found.sample_bytes, np.int64),
        "image_shape": np.array(found.image_shape or (), np.int64), "x_max": np.array(found.x_max, np.float64)})
