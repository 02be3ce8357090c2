"""The digits are read from scikit-learn's file as scikit-learn reads them, and the stratified
split is scikit-learn's whether its indices come from the cache or are drawn again."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from testbed.data import split_cache
from testbed.data.datasets import Dataset, load_dataset, train_test_split


def test_the_digits_read_from_the_shipped_file_are_scikit_learns():
    from sklearn.datasets import load_digits

    bunch, digits = load_digits(), load_dataset("digits")
    assert digits.x.dtype == np.float32 and digits.x.shape == (1797, 1, 8, 8)
    assert np.array_equal(digits.x, (bunch.images / 16.0).astype(np.float32)[:, None])
    assert np.array_equal(digits.y, bunch.target) and digits.y.dtype == np.int64


@pytest.mark.integration
def test_loading_and_splitting_the_digits_a_second_time_imports_no_scikit_learn(tmp_path):
    # A Flower client actor's path: the driver split the data first and kept the indices.
    code = ("import sys; from testbed.data.datasets import load_dataset, train_test_split; "
            "train, test = train_test_split(load_dataset('digits'), 0.25, 7); "
            "print(len(train.y), len(test.y), 'sklearn' in sys.modules)")
    env = {"PATH": "/usr/bin:/bin", "TESTBED_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs == ["1347 450 True\n", "1347 450 False\n"]


@pytest.mark.parametrize("cache", ["on", "off"])
def test_the_split_is_scikit_learns_stratified_split_from_the_cache_or_not(monkeypatch, tmp_path, cache):
    from sklearn.model_selection import train_test_split as sk_split

    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(split_cache.SWITCH_ENV, cache)
    y = np.random.default_rng(0).integers(0, 5, 300)
    expected = sk_split(np.arange(300), test_size=0.3, random_state=4, stratify=y)
    for _ in range(2):  # drawn, then read back (or drawn again with the cache off)
        found = split_cache.stratified_indices(y, 0.3, 4)
        assert all(np.array_equal(a, b) for a, b in zip(found, expected))
    assert len(list(tmp_path.glob("splits/*.npz"))) == (1 if cache == "on" else 0)


def test_other_labels_seeds_or_fractions_are_other_entries(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    y = np.repeat(np.arange(4), 25)
    for labels, fraction, seed in [(y, 0.2, 0), (y, 0.2, 1), (y, 0.3, 0), (y[::-1].copy(), 0.2, 0)]:
        split_cache.stratified_indices(labels, fraction, seed)
    assert len(list(tmp_path.glob("splits/*.npz"))) == 4


@pytest.mark.parametrize("damage", ["bytes", "not a partition"])
def test_a_damaged_or_wrong_split_entry_is_drawn_again_and_rewritten(monkeypatch, tmp_path, damage):
    from testbed.cache import write_arrays

    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    data = Dataset("toy", np.arange(40, dtype=np.float32)[:, None], np.repeat(np.arange(2), 20), 2, None)
    good = train_test_split(data, 0.25, 5)
    [entry] = (tmp_path / "splits").glob("*.npz")
    if damage == "bytes":
        entry.write_bytes(b"not an npz")
    else:  # one sample in both sides: a run must never train on a test sample
        write_arrays(entry, {"train": np.arange(31, dtype=np.int64), "test": np.arange(30, 40, dtype=np.int64)})
    again = train_test_split(data, 0.25, 5)
    assert np.array_equal(again[0].x, good[0].x) and np.array_equal(again[1].y, good[1].y)
    assert split_cache._read(entry, 40) is not None
