"""Tests for the cache of prepared corpora (`testbed.pretrain.corpus_cache`): hits give the uncached
bytes, every input of the preparation is in the key, a damaged entry is rebuilt, and two runs can
fill one key at once."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from testbed.pretrain import corpus_cache, prepare
from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.corpus_cache import LISTING, corpus_key, preparation_config, preparing_modules
from testbed.pretrain.prepare import packing_final_metrics, prepare_corpus
from tests.pretrain.test_pretrain_data import write_folder_corpus


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    """This test's own cache folder."""
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TESTBED_CORPUS_CACHE", raising=False)
    return tmp_path / "cache" / "corpora"


def folder_config(tmp_path: Path, **changes) -> PretrainConfig:
    corpus = tmp_path / "texts"
    if not corpus.exists():
        write_folder_corpus(corpus)
    return PretrainConfig.model_validate({
        "corpus": {"source": "folder", "path": str(corpus), "max_documents": None, "heldout_fraction": 0.2},
        "tokenizer": {"vocab_size": 300}, "context_length": 64, "eval_documents": 5, **changes})


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def entries(cache: Path) -> list[Path]:
    return sorted(cache.iterdir()) if cache.exists() else []


def refuse_to_build(monkeypatch) -> None:
    """Fail the test if the preparation trains a tokenizer (so it did not come from the cache)."""
    def fail(*args, **kwargs):
        raise AssertionError("prepared again instead of read from the cache")
    monkeypatch.setattr(prepare, "train_tokenizer", fail)


def test_a_second_run_copies_the_cached_corpus_with_the_bytes_and_metrics_of_an_uncached_one(
        tmp_path: Path, cache: Path, monkeypatch) -> None:
    config = folder_config(tmp_path)
    prepare_corpus(tmp_path / "first" / "corpus", config, seed=0)
    [entry] = entries(cache)
    with monkeypatch.context() as patch:
        refuse_to_build(patch)
        # Fields the preparation does not read share the entry.
        arrays = prepare_corpus(tmp_path / "second" / "corpus", config.model_copy(update={"lr": 0.1}), seed=0)
    monkeypatch.setenv("TESTBED_CORPUS_CACHE", "off")
    reference = prepare_corpus(tmp_path / "uncached" / "corpus", config, seed=0)
    assert entries(cache) == [entry]  # the switch leaves the cache alone
    assert arrays is not None and reference is not None and arrays.keys() == reference.keys()
    assert all(np.array_equal(arrays[name], reference[name]) for name in arrays)
    second = tmp_path / "second" / "corpus"
    assert contents(second) == contents(tmp_path / "uncached" / "corpus")
    shutil.rmtree(cache)  # the run folder holds its corpus, not a reference to the cache
    assert packing_final_metrics(second) == packing_final_metrics(tmp_path / "uncached" / "corpus")


@pytest.mark.parametrize("changes", [
    {"tokenizer": {"vocab_size": 320}}, {"packing": {"method": "concat"}}, {"packing": {"buffer_size": 8}},
    {"context_length": 48}, {"eval_documents": 6}, {"corpus": {"bos": True}}, {"seed": 1}, {"document": True}])
def test_a_change_to_the_corpus_tokenizer_packing_seed_or_documents_is_another_key(tmp_path: Path, changes) -> None:
    config = folder_config(tmp_path)
    key = corpus_key(preparation_config(config), seed=0)
    changes = dict(changes)
    seed = changes.pop("seed", 0)
    if changes.pop("document", False):  # one document edited in place, same length
        path = tmp_path / "texts" / "doc000.txt"
        path.write_text(path.read_text().replace("a", "b", 1))
    blocks = {name: {**getattr(config, name).model_dump(), **value} if isinstance(value, dict) else value
              for name, value in changes.items()}
    changed = PretrainConfig.model_validate({**config.model_dump(), **blocks})
    assert corpus_key(preparation_config(changed), seed) != key


def test_the_code_in_the_key_is_every_module_the_preparation_imports() -> None:
    modules = preparing_modules()
    assert modules is not None
    # Imported directly (prepare -> packing) and not (packing -> bin_packing -> segment_tree).
    assert {"testbed.pretrain.prepare", "testbed.pretrain.corpus", "testbed.pretrain.tokenizer",
            "testbed.pretrain.token_store", "testbed.pretrain.packing", "testbed.pretrain.bin_packing",
            "testbed.pretrain.segment_tree", "testbed.pretrain.factrecall", "testbed.pretrain.sink_task",
            "testbed.seeding"} <= set(modules)
    assert "testbed.pretrain.model" not in modules and "testbed.pretrain.runner" not in modules


def _flip_a_token(entry: Path) -> None:
    path = entry / "train.tokens.bin"
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def _symlink_a_file(entry: Path) -> None:
    path = entry / "tokenizer.json"
    outside = entry.parent.parent / "tokenizer.json"
    shutil.copyfile(path, outside)  # the same bytes, but not the entry's own file
    path.unlink()
    path.symlink_to(outside)


def _remove_a_file(entry: Path) -> None:
    (entry / "heldout.packed.segments.npy").unlink()


def _break_the_listing(entry: Path) -> None:
    (entry / LISTING).write_text("{")


@pytest.mark.parametrize("damage", [_flip_a_token, _symlink_a_file, _remove_a_file, _break_the_listing])
def test_a_damaged_cache_entry_is_rebuilt_and_replaced(tmp_path: Path, cache: Path, monkeypatch, damage) -> None:
    config = folder_config(tmp_path)
    prepare_corpus(tmp_path / "first" / "corpus", config, seed=0)
    [entry] = entries(cache)
    expected = contents(tmp_path / "first" / "corpus")
    damage(entry)
    prepare_corpus(tmp_path / "run" / "corpus", config, seed=0)
    assert contents(tmp_path / "run" / "corpus") == expected
    assert entries(cache) == [entry]  # replaced under its key, nothing left aside
    with monkeypatch.context() as patch:
        refuse_to_build(patch)
        prepare_corpus(tmp_path / "again" / "corpus", config, seed=0)
    assert contents(tmp_path / "again" / "corpus") == expected


class Exploit:
    """Unpickling this writes a file: the proof that a pickle from the cache was loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


def test_a_forged_entry_holding_a_pickle_is_rebuilt_without_loading_it(tmp_path: Path, cache: Path) -> None:
    config = folder_config(tmp_path)
    prepare_corpus(tmp_path / "first" / "corpus", config, seed=0)
    [entry] = entries(cache)
    expected = contents(tmp_path / "first" / "corpus")
    # A consistent forgery: an object array (a pickle inside the .npy) and a listing that agrees with it.
    marker = tmp_path / "marker"
    target = entry / "train.offsets.npy"
    target.unlink()
    np.save(target, np.array([Exploit(marker)], dtype=object), allow_pickle=True)
    listing = json.loads((entry / LISTING).read_text())
    listing["files"][target.name] = corpus_cache._describe(target)
    (entry / LISTING).write_text(json.dumps(listing))
    prepare_corpus(tmp_path / "run" / "corpus", config, seed=0)
    assert not marker.exists()
    assert contents(tmp_path / "run" / "corpus") == expected


def test_two_runs_filling_one_key_at_once_both_end_with_the_corpus_and_one_entry(
        tmp_path: Path, cache: Path, monkeypatch) -> None:
    config = folder_config(tmp_path)
    both_built = threading.Barrier(2, timeout=60)
    publish = corpus_cache.publish

    def publish_together(entry: Path, built: Path, files: dict) -> None:
        both_built.wait()  # both runs missed and built; now both fill the key
        publish(entry, built, files)

    monkeypatch.setattr(prepare, "publish", publish_together)
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            prepare_corpus(tmp_path / name / "corpus", config, seed=0)
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert contents(tmp_path / "a" / "corpus") == contents(tmp_path / "b" / "corpus")
    [entry] = entries(cache)  # no staging folder left behind
    assert os.listdir(entry) and corpus_cache._read_listing(entry) is not None


def _zero_in_place(path: Path) -> None:
    """Overwrite a read-only file's bytes in place (same inode), as a user's script might."""
    path.chmod(0o644)
    with open(path, "r+b") as handle:
        handle.write(bytes(path.stat().st_size))


def test_a_cache_entry_written_in_place_leaves_the_runs_that_built_and_fetched_it_unchanged(
        tmp_path: Path, cache: Path) -> None:
    config = folder_config(tmp_path)
    built, fetched = tmp_path / "built" / "corpus", tmp_path / "fetched" / "corpus"
    prepare_corpus(built, config, seed=0)
    prepare_corpus(fetched, config, seed=0)
    [entry] = entries(cache)
    expected = contents(built)
    assert contents(fetched) == expected
    for name in ("train.tokens.bin", "tokenizer.json", "manifest.json"):
        _zero_in_place(entry / name)
    assert contents(built) == expected and contents(fetched) == expected
    # Nor the other way round: writing a run's file leaves the cache entry (and so later runs) as it was.
    _zero_in_place(built / "heldout.tokens.bin")
    assert (entry / "heldout.tokens.bin").read_bytes() == expected["heldout.tokens.bin"]


@pytest.mark.parametrize("origin", ["built", "fetched", "uncached"])
def test_the_run_records_the_digest_of_each_corpus_file_and_a_resume_refuses_an_altered_one(
        tmp_path: Path, cache: Path, monkeypatch, origin) -> None:
    from testbed.errors import UserError

    config = folder_config(tmp_path)
    if origin != "built":
        prepare_corpus(tmp_path / "first" / "corpus", config, seed=0)
    if origin == "uncached":
        monkeypatch.setenv("TESTBED_CORPUS_CACHE", "off")
    folder = tmp_path / "run" / "corpus"
    prepare_corpus(folder, config, seed=0)
    recorded = json.loads((folder / corpus_cache.DIGESTS).read_text())["files"]
    assert recorded == {name: corpus_cache._describe(folder / name) for name in recorded}
    assert set(recorded) == set(os.listdir(folder)) - {corpus_cache.DIGESTS}
    assert prepare_corpus(folder, config, seed=0) is None  # intact: the resume goes on
    tokens = folder / "train.tokens.bin"
    data = bytearray(tokens.read_bytes())
    data[3] ^= 0xFF  # one token changed, the size kept
    tokens.write_bytes(bytes(data))
    with pytest.raises(UserError, match=r"train\.tokens\.bin: the corpus file is not the one the run wrote"):
        prepare_corpus(folder, config, seed=0)
