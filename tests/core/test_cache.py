"""The array cache (`testbed.cache`) and the glyphs it keeps: an entry is used only when it is exactly
what the caller expects, is written whole or not at all, and gives the arrays rendering gives."""

from __future__ import annotations

import numpy as np
import pytest

from testbed import cache
from testbed.data import glyphs

EXPECTED = {"x": ("float32", (3, 2)), "y": ("int64", (3,))}
ARRAYS: dict[str, np.ndarray] = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "y": np.arange(3, dtype=np.int64)}


def test_arrays_come_back_as_written(tmp_path):
    cache.write_arrays(tmp_path / "sub" / "e.npz", ARRAYS)
    found = cache.read_arrays(tmp_path / "sub" / "e.npz", EXPECTED)
    assert found is not None and all(np.array_equal(found[k], v) for k, v in ARRAYS.items())
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["e.npz"]  # no temporary file left


@pytest.mark.parametrize("entry", [
    {"x": ARRAYS["x"].astype(np.float64), "y": ARRAYS["y"]},  # another dtype
    {"x": ARRAYS["x"][:2], "y": ARRAYS["y"]},  # another shape
    {"x": ARRAYS["x"]},  # a name missing
    {**ARRAYS, "z": ARRAYS["y"]},  # a name too many
], ids=["dtype", "shape", "missing", "extra"])
def test_an_entry_that_is_not_what_was_expected_is_not_used(tmp_path, entry):
    np.savez(tmp_path / "e.npz", **entry)
    assert cache.read_arrays(tmp_path / "e.npz", EXPECTED) is None


def test_a_damaged_or_pickled_entry_is_not_used(tmp_path):
    cache.write_arrays(tmp_path / "e.npz", ARRAYS)
    whole = (tmp_path / "e.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 2])
    flipped = bytearray(whole)
    flipped[len(whole) // 3] ^= 0xFF  # the zip's CRC or the array's header no longer reads
    (tmp_path / "flipped.npz").write_bytes(bytes(flipped))
    np.savez(tmp_path / "pickled.npz", x=np.array([object()], dtype=object), y=ARRAYS["y"])
    for name in ("cut", "flipped", "pickled", "absent"):
        assert cache.read_arrays(tmp_path / f"{name}.npz", EXPECTED) is None, name


def test_a_folder_that_cannot_be_written_is_skipped(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    cache.write_arrays(tmp_path / "file" / "e.npz", ARRAYS)  # no error
    assert cache.read_arrays(tmp_path / "file" / "e.npz", EXPECTED) is None


def test_the_root_follows_the_environment_and_the_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    assert cache.cache_root("datasets", "TESTBED_DATASET_CACHE") == tmp_path / "datasets"
    monkeypatch.delenv("TESTBED_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root("datasets", "TESTBED_DATASET_CACHE") == tmp_path / "xdg" / "testbed" / "datasets"
    monkeypatch.setenv("TESTBED_DATASET_CACHE", "Off")
    assert cache.cache_root("datasets", "TESTBED_DATASET_CACHE") is None


def test_glyphs_are_rendered_once_then_read_back_and_rendered_again_when_damaged(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    rendered = glyphs.cached_glyphs()
    (entry,) = (tmp_path / "datasets").iterdir()

    def no_rendering(*args):
        raise AssertionError("rendered although the entry is whole")

    real = glyphs.make_glyphs
    monkeypatch.setattr(glyphs, "make_glyphs", no_rendering)
    read = glyphs.cached_glyphs()
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(rendered, read))
    entry.write_bytes(entry.read_bytes()[:1000])
    monkeypatch.setattr(glyphs, "make_glyphs", real)
    again = glyphs.cached_glyphs()
    assert all(np.array_equal(a, b) for a, b in zip(rendered, again))
    assert cache.read_arrays(entry, {"images": ("float32", None), "labels": ("int64", None),
                                     "fonts": ("int64", None)}) is not None  # rewritten whole


def test_the_switch_renders_every_time(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESTBED_DATASET_CACHE", "off")
    monkeypatch.setattr(glyphs, "make_glyphs", lambda per_class, seed: (ARRAYS["x"], ARRAYS["y"], ARRAYS["y"]))
    assert glyphs.cached_glyphs()[0] is ARRAYS["x"] and not (tmp_path / "datasets").exists()
