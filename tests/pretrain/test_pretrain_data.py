"""Tests for the pretraining data path: corpus sources, tokenizer, memory-mapped stores, prepared folders, batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from testbed.errors import ScenarioError
from testbed.pretrain.batches import TrainingData
from testbed.pretrain.config import CorpusConfig, PretrainConfig
from testbed.pretrain.corpus import check_corpus, iter_documents, iter_split
from testbed.pretrain.model import IGNORE_INDEX
from testbed.pretrain.prepare import CorpusManifest, PackedSequences, prepare_corpus
from testbed.pretrain.token_store import TokenStore, TokenStoreWriter
from testbed.pretrain.tokenizer import END_OF_TEXT, PAD, load_tokenizer, save_tokenizer, train_tokenizer

TEXTS = ["def add(a, b):\n    return a + b\n", "Packing keeps documents whole.", "naïve café — 東京 🚀", "x" * 300]


def write_folder_corpus(folder: Path, n_documents: int = 60) -> Path:
    """A folder corpus: half the documents as .txt files, half as lines of a .jsonl file."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "packing", "sequence", "token", "model"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(5, 120)))) for _ in range(n_documents)]
    for i, text in enumerate(texts[: n_documents // 2]):
        (folder / f"doc{i:03d}.txt").write_text(text)
    lines = [json.dumps({"text": text}) for text in texts[n_documents // 2:]]
    (folder / "more.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_stdlib_code_documents_are_python_modules_sampled_by_seed() -> None:
    config = CorpusConfig(source="stdlib_code", max_documents=5)
    first, again, other = (list(iter_documents(config, seed)) for seed in (0, 0, 1))
    assert len(first) == 5 and first == again and first != other
    assert sum(("import " in text or "def " in text) for text in first) >= 3


def test_stdlib_docs_start_with_the_reference_manual_topics() -> None:
    from pydoc_data.topics import topics

    documents = list(iter_documents(CorpusConfig(source="stdlib_docs", max_documents=3), seed=0))
    assert documents == [topics[name] for name in sorted(topics)[:3]]


def test_folder_corpus_reads_txt_files_and_jsonl_lines(tmp_path: Path) -> None:
    folder = write_folder_corpus(tmp_path / "corpus", n_documents=10)
    documents = list(iter_documents(CorpusConfig(source="folder", path=str(folder), max_documents=None), seed=0))
    assert len(documents) == 10
    assert documents[0] == (folder / "doc000.txt").read_text()
    assert documents[-1] == json.loads((folder / "more.jsonl").read_text().splitlines()[-1])["text"]


def test_folder_corpus_names_the_file_and_line_of_a_bad_jsonl_record(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    config = CorpusConfig(source="folder", path=str(tmp_path), max_documents=None)
    with pytest.raises(ScenarioError, match=r"bad.jsonl:2: .*'text' field"):
        list(iter_documents(config, seed=0))


@pytest.mark.parametrize("path, message", [
    (None, "set its path"), ("missing", "is not a folder"), ("empty", "no .txt"),
])
def test_check_corpus_refuses_a_folder_source_it_cannot_read(tmp_path: Path, path, message) -> None:
    (tmp_path / "empty").mkdir()
    config = CorpusConfig(source="folder", path=None if path is None else str(tmp_path / path))
    with pytest.raises(ScenarioError, match=f"s.yaml: pretrain.corpus.path: .*{message}"):
        check_corpus(config, "s.yaml")


def test_heldout_split_is_deterministic_and_near_its_fraction() -> None:
    config = CorpusConfig(source="factrecall", max_documents=None, heldout_fraction=0.2)
    flags = [heldout for heldout, _ in iter_split(config, seed=4)]
    assert flags == [heldout for heldout, _ in iter_split(config, seed=4)]
    assert 0.17 < np.mean(flags) < 0.23


def test_byte_level_bpe_round_trips_any_text_and_survives_saving(tmp_path: Path) -> None:
    tokenizer = train_tokenizer(TEXTS * 20, vocab_size=300)
    save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    unseen = "Ünïcode never seen in training: ∑ → ✓ 🎉\n\ttabs"
    for text in TEXTS + [unseen]:
        ids = tokenizer.encode(text).ids
        assert loaded.encode(text).ids == ids
        assert tokenizer.decode(ids) == text
    assert tokenizer.token_to_id(END_OF_TEXT) is not None and tokenizer.token_to_id(PAD) is not None
    assert len(tokenizer.encode("x" * 300).ids) < 300  # merges were learned


def test_token_store_streams_batches_to_disk_and_maps_them_back(tmp_path: Path) -> None:
    documents = [[1, 2, 3], [], [65_535, 0], list(range(1000))]
    writer = TokenStoreWriter(tmp_path / "store", vocab_size=65_536)
    writer.extend(documents[:2])
    writer.extend(documents[2:])
    store = writer.close()
    reopened = TokenStore(tmp_path / "store", vocab_size=65_536)
    assert isinstance(reopened.tokens, np.memmap) and reopened.tokens.dtype == np.uint16
    assert [reopened[i].tolist() for i in range(len(reopened))] == documents
    assert reopened.lengths.tolist() == [3, 0, 2, 1000] and store.n_tokens == 1005


def prepared(tmp_path: Path, method: str = "best_fit", **changes) -> tuple[Path, PretrainConfig]:
    corpus = write_folder_corpus(tmp_path / "texts")
    config = PretrainConfig.model_validate({
        "corpus": {"source": "folder", "path": str(corpus), "max_documents": None, "heldout_fraction": 0.2},
        "tokenizer": {"vocab_size": 300}, "context_length": 64, "packing": {"method": method},
        "eval_documents": 5, **changes})
    folder = tmp_path / "run" / "corpus"
    prepare_corpus(folder, config, seed=0)
    return folder, config


@pytest.mark.parametrize("method", ["best_fit", "concat", "pad"])
def test_prepared_packing_covers_every_training_token_once(tmp_path: Path, method: str) -> None:
    folder, config = prepared(tmp_path, method)
    manifest = CorpusManifest.load(folder)
    train = TokenStore(folder / "train", manifest.vocab_size)
    packed = PackedSequences.load(folder / "train")
    coverage = [np.zeros(n, dtype=int) for n in train.lengths]
    for i in range(len(packed)):
        for doc, start, end in packed[i]:
            coverage[doc][start:end] += 1
    assert all((c == 1).all() for c in coverage)
    assert manifest.n_train_documents + manifest.n_heldout_documents == 60 and manifest.n_heldout_documents > 0
    assert all(train[i][-1] == manifest.eos_id for i in range(len(train)))  # every document ends with EOS
    assert manifest.packing_method == method and manifest.n_sequences == len(packed)


def test_prepare_returns_side_by_side_stats_once_and_then_reuses_the_folder(tmp_path: Path) -> None:
    corpus = write_folder_corpus(tmp_path / "texts")
    config = PretrainConfig.model_validate({"corpus": {"source": "folder", "path": str(corpus)},
                                            "tokenizer": {"vocab_size": 300}, "context_length": 32})
    arrays = prepare_corpus(tmp_path / "corpus", config, seed=0)
    assert arrays is not None  # a fresh folder is built, so its arrays come back
    methods = arrays["packing_methods"].tolist()
    stats = dict(zip(methods, arrays["packing_stats"]))
    column = arrays["packing_stat_names"].tolist().index("n_sequences")
    assert set(methods) == {"best_fit", "first_fit", "concat", "pad"}
    assert stats["concat"][column] <= stats["best_fit"][column] <= stats["pad"][column]
    assert prepare_corpus(tmp_path / "corpus", config, seed=0) is None


def test_batches_never_predict_across_documents_and_follow_the_seeded_epoch_order(tmp_path: Path) -> None:
    folder, _ = prepared(tmp_path, "concat")
    data = TrainingData(folder, seed=0)
    n = len(data.packed)
    first_epoch, second_epoch = data.global_batch(0, n), data.global_batch(1, n)
    assert sorted(first_epoch.tolist()) == sorted(second_epoch.tolist()) == list(range(n))
    assert first_epoch.tolist() != second_epoch.tolist()  # a fresh order every epoch
    assert np.concatenate([data.global_batch(s, 1) for s in range(n)]).tolist() == first_epoch.tolist()
    assert (TrainingData(folder, seed=0).global_batch(3, 4) == data.global_batch(3, 4)).all()
    assert not (TrainingData(folder, seed=1).global_batch(0, n) == data.global_batch(0, n)).all()
    indices = data.global_batch(0, 4)
    batch = data.batch(indices)
    labelled = batch.labels != IGNORE_INDEX
    assert int(labelled.sum()) == data.label_count(indices)
    rows, cols = torch.nonzero(labelled, as_tuple=True)
    assert (batch.document_ids[rows, cols] == batch.document_ids[rows, cols + 1]).all()
    assert (batch.labels[rows, cols] == batch.tokens[rows, cols + 1]).all()
    assert not labelled[batch.document_ids < 0].any()
