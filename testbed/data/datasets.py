"""Real small datasets that ship inside scikit-learn, or are made from what ships (``moving_digits``
from its digits, ``glyphs`` from matplotlib's fonts), so runs need no network; and one generated
tabular set, ``synthetic_houses``, for experiments that need more samples than any of them.

Each loader returns a `Dataset` of float32 features and int64 labels. Image sets keep their shape
(``digits`` is 1x8x8, scaled to [0, 1]; ``glyphs`` is 1x28x28); tabular sets are standardised with
the training split's statistics inside `train_test_split`, never the test split's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Features, labels and the facts a model needs to be built for them."""

    name: str
    x: np.ndarray
    y: np.ndarray
    num_classes: int
    image_shape: tuple[int, ...] | None  # (channels, height, width) for image data, else None
    # Per sample, where a source has them: the owner (a FEMNIST writer, a table's group column) as
    # 0..K-1 for natural partitions; whether the source itself put the sample in its test split;
    # the codes (-1: missing) of categorical columns, one-hot encoded by `train_test_split` with the
    # training split's categories only.
    groups: np.ndarray | None = None
    is_test: np.ndarray | None = None
    categories: np.ndarray | None = None

    @property
    def num_features(self) -> int:
        return int(np.prod(self.x.shape[1:]))

    def subset(self, index: np.ndarray) -> Dataset:
        """The samples at ``index`` (an index or boolean mask), with their per-sample facts."""
        pick = lambda values: None if values is None else values[index]
        return Dataset(self.name, self.x[index], self.y[index], self.num_classes, self.image_shape,
                       pick(self.groups), pick(self.is_test), pick(self.categories))


def _digits() -> Dataset:
    """scikit-learn's digits, read from the file it ships as its ``load_digits`` reads it (64 pixel
    columns and the label, comma-separated): the file is found without importing scikit-learn,
    whose import (1.2 s) would be most of a Flower client actor's start-up. A test checks the
    arrays against ``load_digits``."""
    import gzip
    from importlib.util import find_spec

    spec = find_spec("sklearn")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn is not installed: the digits dataset ships with it")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",")
    x = (table[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[:, None, :, :]
    return Dataset("digits", x, table[:, -1].astype(np.int64), 10, (1, 8, 8))


def _tabular(name: str, loader: str) -> Callable[[], Dataset]:
    def load() -> Dataset:
        from sklearn import datasets as sk_datasets

        bunch = getattr(sk_datasets, loader)()
        y = bunch.target.astype(np.int64)
        return Dataset(name, bunch.data.astype(np.float32), y, int(y.max()) + 1, None)

    return load


def _synthetic_houses() -> Dataset:
    """Binary classification of the size of OpenML's ``houses`` (20640 x 8), the data of Cyffers et
    al.'s Fig. 2, drawn by scikit-learn's ``make_classification`` with a fixed ``random_state``.

    No real tabular set of that size ships offline; 2048 graph nodes need about 8 training samples
    each, which the bundled sets (at most 1797 samples) cannot give. The draw is fixed so that every
    scenario sees the same data; the scenario's seed still drives the split and the partition.
    """
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=20640, n_features=8, n_informative=6, n_redundant=2,
                               class_sep=1.0, flip_y=0.05, random_state=823)
    return Dataset("synthetic_houses", x.astype(np.float32), y.astype(np.int64), 2, None)


def _moving_digits() -> Dataset:
    from testbed.data.moving_digits import CANVAS, FRAMES, digit_sequences  # imported on use, like scikit-learn

    sequences, digits = digit_sequences()
    return Dataset("moving_digits", sequences, digits, 10, (FRAMES, CANVAS, CANVAS))


def _glyphs() -> Dataset:
    from testbed.data.glyphs import CHARACTERS, SIDE, glyph_images  # imported on use, like scikit-learn

    images, labels, _ = glyph_images()  # generated once per process, read-only: each load gets copies
    return Dataset("glyphs", images.copy(), labels.copy(), len(CHARACTERS), (1, SIDE, SIDE))


DATASETS: dict[str, Callable[[], Dataset]] = {
    "digits": _digits,
    "wine": _tabular("wine", "load_wine"),
    "breast_cancer": _tabular("breast_cancer", "load_breast_cancer"),
    "iris": _tabular("iris", "load_iris"),
    "moving_digits": _moving_digits,
    "glyphs": _glyphs,
    "synthetic_houses": _synthetic_houses,
}
# The bundled sets that are images, known without loading them (validation asks before any load).
IMAGE_DATASETS = frozenset({"digits", "moving_digits", "glyphs"})
# Samples and classes of the bundled sets, likewise known without loading them (validation checks
# the train/test split a scenario asks for; a test checks the table against the loaded sets).
BUNDLED_SIZES: dict[str, tuple[int, int]] = {
    "digits": (1797, 10), "wine": (178, 3), "breast_cancer": (569, 2), "iris": (150, 3), "moving_digits": (1797, 10),
    "glyphs": (7200, 36), "synthetic_houses": (20640, 2),
}


def split_problem(samples: int, classes: int, test_fraction: float) -> str | None:
    """Why a stratified split of ``samples`` samples of ``classes`` classes with ``test_fraction`` held
    out cannot be made (each side needs a sample of every class), or None if it can. The counts are
    scikit-learn's: the test share is rounded up."""
    test = math.ceil(test_fraction * samples)
    train = samples - test
    if min(train, test) >= classes:
        return None
    return (f"data.test_fraction: {test_fraction} of {samples} samples leaves {train} for training and {test} "
            f"for testing; each side needs at least one sample of each of the {classes} classes")


def load_dataset(name: str) -> Dataset:
    """Load a registered dataset by name."""
    return DATASETS[name]()


def train_test_split(data: Dataset, test_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """A stratified split (or the source's own, where it marks its test samples); tabular features
    are standardised, and categorical codes one-hot encoded, with the training split's statistics."""
    if data.is_test is not None:
        train_idx, test_idx = np.flatnonzero(~data.is_test), np.flatnonzero(data.is_test)
    else:
        train_idx, test_idx = _stratified(data, test_fraction, seed)
    train, test = data.subset(train_idx), data.subset(test_idx)
    x_train, x_test = train.x, test.x
    if data.image_shape is None:
        mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-8
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    if data.categories is not None:
        x_train, x_test = _one_hot(train.categories, x_train), _one_hot(test.categories, x_test, train.categories)
    part = lambda d, x: Dataset(d.name, x.astype(np.float32), d.y, d.num_classes, d.image_shape, d.groups)
    return part(train, x_train), part(test, x_test)


def _stratified(data: Dataset, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    problem = split_problem(len(data.y), len(np.unique(data.y)), test_fraction)
    if problem is not None:
        from testbed.data.partition import PartitionError

        raise PartitionError(problem)
    from testbed.data.split_cache import stratified_indices  # scikit-learn's split, cached: its import is 1.2 s

    return stratified_indices(data.y, test_fraction, seed)


def _one_hot(codes: np.ndarray | None, x: np.ndarray, train_codes: np.ndarray | None = None) -> np.ndarray:
    """``x`` with one 0/1 column per category the training split holds (``train_codes``, or
    ``codes`` themselves for the training split): a category seen only in testing is all zeros."""
    assert codes is not None
    known = codes if train_codes is None else train_codes
    columns = [codes[:, [j]] == np.unique(known[:, j][known[:, j] >= 0])[None, :] for j in range(codes.shape[1])]
    return np.concatenate([x.reshape(len(x), -1), *columns], axis=1).astype(np.float32)
