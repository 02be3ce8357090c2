"""Tests for the array path of the packer (`pack_arrays`): same bins as before, columns end to end.

The digests below were recorded from the Segment lists of the implementation before the array
path (main e2b5140, `pack_documents` and `prepare.packing_report_arrays`), so a change to any
packing decision, tie-break or piece boundary fails here, whichever path produced it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from testbed.pretrain.batches import make_batch
from testbed.pretrain.bin_packing import first_fit_decreasing_pack, reference_best_fit_pack
from testbed.pretrain.packing import (
    PackedArrays,
    Segment,
    iter_packed_sequences,
    pack_arrays,
    pack_documents,
    split_into_chunks,
)
from testbed.pretrain.prepare import PackedSequences, packing_report_arrays
from testbed.pretrain.synthetic_documents import lognormal_document_lengths
from testbed.pretrain.token_store import TokenStoreWriter

METHODS = ("best_fit", "first_fit", "concat", "pad")
BUFFER_SIZES = (None, 7, 1000)
# name -> (lengths, capacity) of the recorded inputs: heavy-tailed, and small lengths full of ties.
RECORDED_INPUTS = {
    "lognormal": (lambda: lognormal_document_lengths(20_000, np.random.default_rng(7)), 2048),
    "ties": (lambda: np.random.default_rng(3).integers(0, 40, 5_000), 16),
}
# sha256 (first 16 hex digits) of offsets and (doc_id, start, end) rows, per input/method/buffer size.
RECORDED_PACKINGS = {
    "lognormal/best_fit/None": "60620a7d5f43bd94", "lognormal/best_fit/7": "ede9ff750ba9dd6a",
    "lognormal/best_fit/1000": "9c13e86f20026a8e", "lognormal/first_fit/None": "3d30677511379007",
    "lognormal/first_fit/7": "9ca60fdca11a850d", "lognormal/first_fit/1000": "e5f72517cb40bc47",
    "lognormal/concat/None": "41076eaf62dcfef1", "lognormal/concat/7": "41076eaf62dcfef1",
    "lognormal/concat/1000": "41076eaf62dcfef1", "lognormal/pad/None": "e23c92b612833958",
    "lognormal/pad/7": "e23c92b612833958", "lognormal/pad/1000": "e23c92b612833958",
    "ties/best_fit/None": "afad67d26b263048", "ties/best_fit/7": "df622b06db809bf7",
    "ties/best_fit/1000": "2a7fcde23b08d646", "ties/first_fit/None": "afad67d26b263048",
    "ties/first_fit/7": "00c96677775ea031", "ties/first_fit/1000": "9f59adbaaa9d6189",
    "ties/concat/None": "ecc773581fa1282e", "ties/concat/7": "ecc773581fa1282e",
    "ties/concat/1000": "ecc773581fa1282e", "ties/pad/None": "17d830aaf4779924",
    "ties/pad/7": "17d830aaf4779924", "ties/pad/1000": "17d830aaf4779924",
}
# sha256 (first 16 hex digits) of the report's arrays, per input and array name.
RECORDED_REPORTS = {
    "lognormal": {"sequence_tokens_best_fit": "8244e9480e6849db", "sequence_tokens_first_fit": "cb93168b6725cc0d",
                  "sequence_tokens_concat": "4b298d5c2a763ad7", "sequence_tokens_pad": "a81ab1b4082d432e",
                  "packing_stats": "13594671809ac084"},
    "ties": {"sequence_tokens_best_fit": "e38729e0094b08b4", "sequence_tokens_first_fit": "e38729e0094b08b4",
             "sequence_tokens_concat": "e38729e0094b08b4", "sequence_tokens_pad": "b5a0f4dd173e1bce",
             "packing_stats": "a811bfdf201413ae"},
}


def digest(*arrays: np.ndarray) -> str:
    """First 16 hex digits of the sha256 of the arrays' bytes."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()[:16]


def digest_packing(sequences: Sequence[Sequence[tuple[int, int, int]]]) -> str:
    """The recorded digest of a packing given as Segment lists (int64 offsets, then int64 rows)."""
    offsets = np.cumsum([0] + [len(sequence) for sequence in sequences]).astype(np.int64)
    rows = np.asarray([tuple(piece) for sequence in sequences for piece in sequence], dtype=np.int64).reshape(-1, 3)
    return digest(offsets, rows)


def reference_packing(lengths: np.ndarray, capacity: int, method: str, buffer_size: int | None) -> list[list[Segment]]:
    """Chunk each buffer, pack it with the textbook scan (best_fit) or plain FFD, build Segment lists by hand."""
    packer = reference_best_fit_pack if method == "best_fit" else first_fit_decreasing_pack
    step = buffer_size or max(lengths.size, 1)
    sequences = []
    for low in range(0, lengths.size, step):
        chunks = split_into_chunks(lengths[low: low + step], capacity, first_doc_id=low)
        for bin_items in packer(chunks.lengths, capacity):
            sequences.append([Segment(int(chunks.doc_ids[i]), int(chunks.starts[i]),
                                      int(chunks.starts[i] + chunks.lengths[i])) for i in bin_items])
    return sequences


@pytest.mark.parametrize("method", ["best_fit", "first_fit"])
@pytest.mark.parametrize("capacity", [1, 5, 16, 64])
@pytest.mark.parametrize("seed", range(4))
def test_array_bins_equal_the_reference_packer_on_random_inputs_with_ties(method: str, capacity: int,
                                                                         seed: int) -> None:
    # Lengths 0..3L: empty documents, documents cut into chunks, and (few distinct values) many ties.
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 3 * capacity + 1, size=int(rng.integers(1, 400)))
    for buffer_size in (None, 1, 13):
        packed = pack_arrays(lengths, capacity, method, buffer_size)
        assert packed.segments() == reference_packing(lengths, capacity, method, buffer_size)


@pytest.mark.parametrize("name", sorted(RECORDED_INPUTS))
@pytest.mark.parametrize("method", METHODS)
def test_arrays_round_trip_to_the_segment_lists_of_the_previous_implementation(name: str, method: str) -> None:
    make_lengths, capacity = RECORDED_INPUTS[name]
    lengths = make_lengths()
    for buffer_size in BUFFER_SIZES:
        packed = pack_arrays(lengths, capacity, method, buffer_size)
        sequences = packed.segments()
        assert digest_packing(sequences) == RECORDED_PACKINGS[f"{name}/{method}/{buffer_size}"]
        assert pack_documents(lengths, capacity, method, buffer_size) == sequences
        assert list(iter_packed_sequences(iter(lengths.tolist()), capacity, method, buffer_size)) == sequences
        assert pack_arrays(iter(lengths.tolist()), capacity, method, buffer_size).segments() == sequences
        assert all(column.dtype == np.int64 for column in packed)


@pytest.mark.parametrize("name", sorted(RECORDED_INPUTS))
def test_report_arrays_from_columns_equal_the_previous_implementation(name: str) -> None:
    make_lengths, capacity = RECORDED_INPUTS[name]
    arrays = packing_report_arrays(make_lengths(), capacity, None)
    assert {key: digest(arrays[key]) for key in RECORDED_REPORTS[name]} == RECORDED_REPORTS[name]


def test_best_fit_arrays_stay_within_0_01_percent_of_the_lower_bound_on_a_seeded_corpus() -> None:
    lengths = lognormal_document_lengths(300_000, np.random.default_rng(11))
    capacity = 2048
    packed = pack_arrays(lengths, capacity, "best_fit")
    lower_bound = -(-int(lengths.sum()) // capacity)
    assert lower_bound <= packed.n_sequences <= 1.0001 * lower_bound
    # Every token placed exactly once: per document, its pieces tile [0, length).
    tokens = packed.sequence_tokens()
    assert tokens.max() <= capacity and int(tokens.sum()) == int(lengths.sum())
    order = np.lexsort((packed.starts, packed.doc_ids))
    doc_ids, starts, ends = packed.doc_ids[order], packed.starts[order], packed.ends[order]
    first = np.r_[True, doc_ids[1:] != doc_ids[:-1]]
    assert np.all(starts[first] == 0) and np.all(starts[~first] == ends[np.flatnonzero(~first) - 1])
    last = np.r_[doc_ids[1:] != doc_ids[:-1], True]
    assert np.array_equal(ends[last], lengths[doc_ids[last]]) and np.unique(doc_ids).size == np.count_nonzero(lengths)


@pytest.mark.parametrize("method", METHODS)
def test_an_empty_corpus_packs_into_no_sequences(method: str) -> None:
    packed = pack_arrays(np.zeros(0, dtype=np.int64), 8, method)
    assert packed.n_sequences == 0 and packed.segments() == [] == pack_documents([], 8, method)
    assert PackedSequences.from_arrays(packed).segments.shape == (0, 3)


@pytest.mark.parametrize("method", METHODS)
def test_stored_packing_from_columns_equals_the_one_from_segment_lists(method: str) -> None:
    lengths = np.random.default_rng(5).integers(0, 200, 2_000)
    from_columns = PackedSequences.from_arrays(pack_arrays(lengths, 64, method, 300))
    from_lists = PackedSequences.from_sequences(iter_packed_sequences(lengths.tolist(), 64, method, 300))
    for name in ("offsets", "segments"):
        ours, theirs = getattr(from_columns, name), getattr(from_lists, name)
        assert ours.dtype == theirs.dtype == np.int64 and np.array_equal(ours, theirs)
    assert all(from_columns[i] == from_lists[i] for i in range(len(from_lists)))
    assert all(np.array_equal(from_columns.rows(i), np.asarray(from_lists[i]).reshape(-1, 3))
               for i in range(len(from_lists)))


def test_a_batch_from_stored_rows_equals_the_batch_from_segment_lists(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    documents = [rng.integers(0, 100, int(n)).tolist() for n in rng.integers(1, 40, 60)]
    writer = TokenStoreWriter(tmp_path / "store", vocab_size=100)
    writer.extend(documents)
    store = writer.close()
    packed = PackedSequences.from_arrays(pack_arrays(documents, 32, "best_fit"))
    indices = range(len(packed))
    from_rows = make_batch([packed.rows(i) for i in indices], store, 32, pad_id=7)
    from_segments = make_batch([packed[i] for i in indices], store, 32, pad_id=7)
    for name in ("tokens", "document_ids", "labels"):
        torch.testing.assert_close(getattr(from_rows, name), getattr(from_segments, name), rtol=0, atol=0)
    assert from_rows.document_tokens == sum(len(document) for document in documents)


def test_concatenating_buffers_shifts_each_buffers_offsets() -> None:
    lengths = np.random.default_rng(4).integers(1, 100, 500)
    parts = [pack_arrays(lengths[low: low + 100], 64, "best_fit") for low in range(0, 500, 100)]
    joined = PackedArrays.concatenate(parts)
    assert joined.segments() == [sequence for part in parts for sequence in part.segments()]
    assert joined.n_sequences == sum(part.n_sequences for part in parts)
