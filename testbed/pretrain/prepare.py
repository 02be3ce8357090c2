"""Build a run's corpus folder: split, train the tokenizer, tokenize into memory-mapped stores, pack.

The driver runs this once, before any training process starts; the training processes only read
the result. Layout of ``RUN/corpus/``::

    tokenizer.json                    the byte-level BPE tokenizer (`testbed.pretrain.tokenizer`; none
                                      for the bigram_backcopy task, whose ids are its symbols)
    train.tokens.bin, .offsets.npy    training documents, each ending with <|endoftext|> (and starting
                                      with <|bos|> under ``corpus.bos``)
    heldout.tokens.bin, .offsets.npy  held-out documents (perplexity, fact recall)
    train.packed.offsets.npy          the packing: sequence i is segments[offsets[i]:offsets[i + 1]],
    train.packed.segments.npy         each row (document, start, end); its statistics are among the
                                      run's final metrics (`packing_final_metrics`)
    heldout.packed.*.npy              the first eval_documents held-out documents, best-fit packed
    factrecall_eval.json              questions of held-out fact-recall documents (factrecall corpus only)
    manifest.json                     sizes and special ids; written last, so its presence marks a complete folder
    digests.json                      each file's size and SHA-256 when the run wrote it (`check_digests`)

Everything streams: documents pass through in batches, so the corpus never sits in memory whole.
The folder is built under a temporary name and renamed, so an interrupted build is redone. A
folder once built is kept in a cache shared by runs (`testbed.pretrain.corpus_cache`), and a later
run of the same corpus, tokenizer, packing and seed copies it instead of building it again. Either
way the run owns its copy, and a resumed run goes on only with the bytes it started with: its
files are checked against digests.json first, and an altered one is refused in one line.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from testbed.pretrain.config import PretrainConfig
from testbed.pretrain.corpus import HELDOUT, corpus_seeds, factrecall_heldout, iter_split
from testbed.pretrain.corpus_cache import (
    cache_entry,
    check_digests,
    describe_files,
    fetch,
    preparation_config,
    publish,
    record_digests,
)
from testbed.pretrain.packing import METHODS, PackedArrays, PackingStats, Segment, pack_arrays
from testbed.pretrain.sink_task import task_documents
from testbed.pretrain.token_store import TokenStore, TokenStoreWriter
from testbed.pretrain.tokenizer import BOS, END_OF_TEXT, PAD, save_tokenizer, special_id, train_tokenizer
from testbed.seeding import SeedTree, stream

TOKENIZE_BATCH = 256


@dataclass(frozen=True)
class CorpusManifest:
    """What the training processes need to know about a prepared corpus."""

    vocab_size: int
    eos_id: int
    pad_id: int
    context_length: int
    packing_method: str
    n_train_documents: int
    n_heldout_documents: int
    n_train_tokens: int
    n_sequences: int
    bos_id: int | None = None  # the id every document starts with (corpus.bos, bigram_backcopy)

    @classmethod
    def load(cls, folder: Path) -> CorpusManifest:
        return cls(**json.loads((folder / "manifest.json").read_text()))


class PackedSequences:
    """A packing stored as arrays: sequence i is the segments ``segments[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, offsets: np.ndarray, segments: np.ndarray):
        self.offsets = offsets
        self.segments = segments

    @classmethod
    def from_sequences(cls, sequences: Iterable[list[Segment]]) -> PackedSequences:
        offsets, rows = [0], []
        for sequence in sequences:
            rows.extend(sequence)
            offsets.append(len(rows))
        return cls(np.asarray(offsets, dtype=np.int64), np.asarray(rows, dtype=np.int64).reshape(-1, 3))

    @classmethod
    def from_arrays(cls, packed: PackedArrays) -> PackedSequences:
        """The stored form of a packing given as columns (`testbed.pretrain.packing.pack_arrays`)."""
        return cls(packed.offsets.astype(np.int64, copy=False), packed.rows().astype(np.int64, copy=False))

    @classmethod
    def load(cls, prefix: Path) -> PackedSequences:
        return cls(np.load(f"{prefix}.packed.offsets.npy", mmap_mode="r"),
                   np.load(f"{prefix}.packed.segments.npy", mmap_mode="r"))

    def save(self, prefix: Path) -> None:
        np.save(f"{prefix}.packed.offsets.npy", self.offsets)
        np.save(f"{prefix}.packed.segments.npy", self.segments)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> list[Segment]:
        return [Segment(d, s, e) for d, s, e in self.rows(index).tolist()]

    def rows(self, index: int) -> np.ndarray:
        """Sequence ``index`` as an (n, 3) array of (doc_id, start, end) rows (no Segment objects)."""
        return self.segments[int(self.offsets[index]): int(self.offsets[index + 1])]


def prepare_corpus(folder: Path, config: PretrainConfig, seed: int) -> dict[str, np.ndarray] | None:
    """Build ``folder`` unless it is complete already, from the cache of prepared corpora where it
    holds this one (`testbed.pretrain.corpus_cache`); returns the report's arrays when it builds.
    A complete folder (a resumed run's) is checked against the digests recorded when it was
    written: an altered file is a `UserError` naming it, before anything trains on it."""
    if (folder / "manifest.json").is_file():
        check_digests(folder)
        return None
    config = preparation_config(config)  # the fields of the cache key, and only those
    partial = folder.with_name("." + folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    entry = cache_entry(config, seed)
    files = fetch(entry, partial) if entry is not None else None
    if files is None:
        partial.mkdir(parents=True)
        _build(partial, config, seed)
        files = describe_files(partial)
        if entry is not None:
            publish(entry, partial, files)
    record_digests(partial, files)  # before the rename: a complete folder always has its digests
    return _finish(folder, partial, config)


def _build(partial: Path, config: PretrainConfig, seed: int) -> None:
    seeds = corpus_seeds(seed)  # the run's tree, built once here: the preparation gets only the root seed
    if config.corpus.source == "bigram_backcopy":
        _write_task(partial, config, seeds)
        return
    train_texts = (text for heldout, text in iter_split(config.corpus, seeds) if not heldout)
    tokenizer = train_tokenizer(itertools.islice(train_texts, config.tokenizer.train_documents),
                                config.tokenizer.vocab_size, bos=config.corpus.bos)
    save_tokenizer(tokenizer, partial / "tokenizer.json")
    vocab_size, eos_id = tokenizer.get_vocab_size(), special_id(tokenizer, END_OF_TEXT)
    bos_id = special_id(tokenizer, BOS) if config.corpus.bos else None
    train, heldout = _tokenize(tokenizer, config, seeds, partial, vocab_size, eos_id, bos_id)
    _pack(partial, config, train, heldout)
    if config.corpus.source == "factrecall":
        _write_factrecall_questions(partial / "factrecall_eval.json", config, seeds)
    _write_manifest(partial, config, vocab_size, eos_id, special_id(tokenizer, PAD), bos_id, train, heldout)


def _pack(partial: Path, config: PretrainConfig, train: TokenStore, heldout: TokenStore) -> None:
    length = config.context_length
    packed = pack_arrays(train.lengths, length, config.packing.method, config.packing.buffer_size)
    PackedSequences.from_arrays(packed).save(partial / "train")
    eval_lengths = heldout.lengths[: config.eval_documents]
    PackedSequences.from_arrays(pack_arrays(eval_lengths, length, "best_fit")).save(partial / "heldout")


def _write_manifest(partial: Path, config: PretrainConfig, vocab_size: int, eos_id: int, pad_id: int,
                    bos_id: int | None, train: TokenStore, heldout: TokenStore) -> None:
    n_sequences = len(PackedSequences.load(partial / "train"))
    manifest = CorpusManifest(vocab_size, eos_id, pad_id, config.context_length, config.packing.method,
                              len(train), len(heldout), train.n_tokens, n_sequences, bos_id)
    (partial / "manifest.json").write_text(json.dumps(asdict(manifest), indent=1))


def _finish(folder: Path, partial: Path, config: PretrainConfig) -> dict[str, np.ndarray]:
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    lengths = TokenStore(folder / "train", CorpusManifest.load(folder).vocab_size).lengths
    return packing_report_arrays(lengths, config.context_length, config.packing.buffer_size)


def _tokenize(tokenizer, config: PretrainConfig, seeds: SeedTree, folder: Path, vocab_size: int,
              eos_id: int, bos_id: int | None) -> tuple[TokenStore, TokenStore]:
    writers = {False: TokenStoreWriter(folder / "train", vocab_size),
               True: TokenStoreWriter(folder / "heldout", vocab_size)}
    start = [] if bos_id is None else [bos_id]
    for batch in _batched(iter_split(config.corpus, seeds), TOKENIZE_BATCH):
        encodings = tokenizer.encode_batch([text for _, text in batch])
        for (heldout, _), encoding in zip(batch, encodings):
            writers[heldout].extend([start + encoding.ids + [eos_id]])
    return writers[False].close(), writers[True].close()


# Drawn by `testbed.pretrain.sink_task.task_documents` from the tree `_write_task` hands it.
TASK = stream("corpus.bigram_backcopy.task", "the bigram_backcopy task: its bigram table and triggers")
TASK_DOCUMENTS = stream("corpus.bigram_backcopy.documents", "the token documents drawn from the bigram_backcopy task")


def _write_task(partial: Path, config: PretrainConfig, seeds: SeedTree) -> None:
    """The bigram_backcopy corpus: documents of the context length drawn from the run's task,
    each held out with probability ``heldout_fraction`` (the split stream of the text sources);
    at least one document on each side."""
    task, documents = task_documents(config.corpus.bigram_backcopy, config.context_length, seeds)
    draws = seeds.numpy(HELDOUT.path).random(len(documents)) < config.corpus.heldout_fraction
    draws[0], draws[-1] = draws[0] or not draws.any(), draws[-1] and not draws.all()
    writers = {False: TokenStoreWriter(partial / "train", task.vocab_size),
               True: TokenStoreWriter(partial / "heldout", task.vocab_size)}
    for heldout in (False, True):
        writers[heldout].extend(documents[draws == heldout].tolist())
    train, heldout_store = writers[False].close(), writers[True].close()
    _pack(partial, config, train, heldout_store)
    _write_manifest(partial, config, task.vocab_size, task.eos_id, task.pad_id, task.bos_id, train, heldout_store)


def _batched(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _write_factrecall_questions(path: Path, config: PretrainConfig, seeds: SeedTree) -> None:
    documents = factrecall_heldout(config.corpus, seeds)[: config.corpus.factrecall.eval_documents]
    questions = [{"prompt": document.text[: q.prompt_end], "answer": q.answer, "stated_values": list(q.stated_values)}
                 for document in documents for q in document.questions]
    path.write_text(json.dumps(questions))


# The packing statistics a run reports among its final metrics, as "packing.<name>".
PACKING_FINAL_METRICS = ("truncated_share", "padding_share", "excess_sequence_share")


def train_packing_stats(folder: Path) -> PackingStats:
    """Packing statistics of the training packing stored in the corpus folder ``folder`` (the run's own
    method on its training documents: the same numbers as that method's row of ``packing_stats``)."""
    manifest = CorpusManifest.load(folder)
    packed = PackedSequences.load(folder / "train")
    lengths = TokenStore(folder / "train", manifest.vocab_size).lengths
    return PackingStats.from_segment_documents(packed.segments[:, 0], len(packed), lengths, manifest.context_length)


def packing_final_metrics(folder: Path) -> dict[str, float]:
    """``packing.truncated_share``, ``packing.padding_share``, ``packing.excess_sequence_share`` of the
    training packing in the corpus folder ``folder``."""
    stats = train_packing_stats(folder).as_dict()
    return {f"packing.{name}": float(stats[name]) for name in PACKING_FINAL_METRICS}


def packing_report_arrays(lengths: np.ndarray, capacity: int, buffer_size: int | None) -> dict[str, np.ndarray]:
    """Packing statistics of every method on these documents, side by side, and the length histograms' data."""
    stats, arrays = [], {}
    for method in METHODS:
        packed = pack_arrays(lengths, capacity, method, buffer_size)
        stats.append(PackingStats.from_segment_documents(packed.doc_ids, packed.n_sequences, lengths, capacity)
                     .as_dict())
        arrays[f"sequence_tokens_{method}"] = packed.sequence_tokens().astype(np.int64)
    names = list(stats[0])
    arrays.update({
        "document_lengths": np.asarray(lengths, dtype=np.int64),
        "context_length": np.asarray(capacity),
        "packing_methods": np.asarray(METHODS),
        "packing_stat_names": np.asarray(names),
        "packing_stats": np.asarray([[float(row[name]) for name in names] for row in stats]),
    })
    return arrays
