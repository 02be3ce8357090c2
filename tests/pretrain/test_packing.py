"""Tests for Best-fit Packing (Ding et al., ICML 2024), its baselines and packing statistics."""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest

from testbed.pretrain import bin_packing
from testbed.pretrain.bin_packing import (
    Bins,
    best_fit_pack,
    first_fit_decreasing_pack,
    grouped_best_fit_pack,
    reference_best_fit_pack,
    segment_tree_best_fit_pack,
)
from testbed.pretrain.packing import (
    PackingStats,
    Segment,
    iter_bin_packed_arrays,
    iter_packed_sequences,
    materialize_tokens,
    pack_documents,
    position_document_ids,
    split_into_chunks,
)
from testbed.pretrain.synthetic_documents import lognormal_document_lengths

METHODS = ["best_fit", "first_fit", "concat", "pad"]


def token_coverage(sequences: list[list[Segment]], lengths: np.ndarray) -> np.ndarray:
    """How many times each token of each document appears, flattened document after document."""
    doc_offsets = np.concatenate([[0], np.cumsum(lengths)])
    counts = np.zeros(int(lengths.sum()), dtype=np.int64)
    for sequence in sequences:
        for doc_id, start, end in sequence:
            counts[doc_offsets[doc_id] + start: doc_offsets[doc_id] + end] += 1
    return counts


def small_random_lengths(seed: int, capacity: int = 64, n_documents: int = 300) -> np.ndarray:
    """Lengths from 0 to 3 * capacity, so that some documents need chunking."""
    return np.random.default_rng(seed).integers(0, 3 * capacity, size=n_documents)


def test_best_fit_follows_the_paper_appendix_example() -> None:
    # Prepare: OLMo-core's rendering of the paper's Appendix B example.
    lengths, capacity = [8, 6, 6, 4, 3], 8
    # Execute
    bins = best_fit_pack(lengths, capacity)
    # Assert: items 8, 6, 6, 4, 3 go to bins 0, 1, 2, 3, 3.
    assert bins == [[0], [1], [2], [3, 4]]


def test_best_fit_and_first_fit_differ_where_a_tighter_later_bin_exists() -> None:
    # Prepare: after 7 | 5+4 the bins have 3 and 1 slots left; the last item has length 1.
    lengths, capacity = [4, 7, 5, 1], 10
    # Execute
    best_fit = best_fit_pack(lengths, capacity)
    first_fit = first_fit_decreasing_pack(lengths, capacity)
    # Assert: best fit takes the tighter bin 1, first fit the first bin 0.
    assert best_fit == [[1], [2, 0, 3]]
    assert first_fit == [[1, 3], [2, 0]]


BEST_FIT_PACKERS: dict[str, Callable[[np.ndarray, int], Bins]] = {
    "grouped": lambda lengths, capacity: grouped_best_fit_pack(lengths, capacity).as_lists(),
    "dispatching": best_fit_pack,
    "segment_tree": segment_tree_best_fit_pack,
}


@pytest.mark.parametrize("packer", BEST_FIT_PACKERS)
@pytest.mark.parametrize("capacity", [1, 2, 7, 64, 300])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_fit_equals_reference_on_random_inputs(packer: str, capacity: int, seed: int) -> None:
    # Prepare: many ties in length, so the tie-breaking rule is exercised; sizes from 0 up.
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, capacity + 1, size=int(rng.integers(0, 400)))
    # Execute
    fast = BEST_FIT_PACKERS[packer](lengths, capacity)
    reference = reference_best_fit_pack(lengths, capacity)
    # Assert: identical bins, in identical order.
    assert fast == reference


def test_grouped_best_fit_equals_the_segment_tree_on_heavy_tailed_chunks() -> None:
    # Prepare: 20,000 log-normal documents at L = 2048 (the benchmark's distribution).
    chunks = split_into_chunks(lognormal_document_lengths(20_000, np.random.default_rng(7)), 2048)
    # Execute
    grouped = grouped_best_fit_pack(chunks.lengths, 2048)
    tree = segment_tree_best_fit_pack(chunks.lengths, 2048)
    # Assert
    assert grouped.as_lists() == tree


def test_grouped_best_fit_steps_per_free_space_not_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: count the bucket reads; 30,000 items of 40 distinct lengths.
    calls = []
    take = bin_packing._OpenBins.take

    def counted_take(self: bin_packing._OpenBins, space: int, n_bins: int) -> np.ndarray:
        calls.append(space)
        return take(self, space, n_bins)

    monkeypatch.setattr(bin_packing._OpenBins, "take", counted_take)
    lengths = np.random.default_rng(0).integers(1, 41, size=30_000) * 50
    # Execute
    packed = grouped_best_fit_pack(lengths, 2048)
    # Assert: far fewer Python-level steps than items, and the same bins as item by item.
    assert len(calls) < 2_000
    assert packed.as_lists() == segment_tree_best_fit_pack(lengths, 2048)


def test_split_into_chunks_cuts_only_documents_longer_than_capacity() -> None:
    # Prepare
    lengths, capacity = [0, 5, 8, 17], 8
    # Execute
    chunks = split_into_chunks(lengths, capacity, first_doc_id=10)
    # Assert: full chunks first, then the remainder; the empty document vanishes.
    assert chunks.doc_ids.tolist() == [11, 12, 13, 13, 13]
    assert chunks.starts.tolist() == [0, 0, 0, 8, 16]
    assert chunks.lengths.tolist() == [5, 8, 8, 8, 1]


@pytest.mark.parametrize("method", METHODS)
def test_every_token_appears_exactly_once(method: str) -> None:
    # Prepare
    lengths, capacity = small_random_lengths(seed=3), 64
    # Execute
    sequences = pack_documents(lengths, capacity, method=method)
    # Assert
    assert np.all(token_coverage(sequences, lengths) == 1)


@pytest.mark.parametrize("method", METHODS)
def test_no_sequence_exceeds_capacity(method: str) -> None:
    # Prepare
    lengths, capacity = small_random_lengths(seed=4), 64
    # Execute
    sequences = pack_documents(lengths, capacity, method=method)
    # Assert
    assert max(sum(end - start for _, start, end in seq) for seq in sequences) <= capacity


def test_best_fit_cuts_a_document_only_into_its_chunks() -> None:
    # Prepare
    lengths, capacity = small_random_lengths(seed=5), 64
    # Execute
    sequences = pack_documents(lengths, capacity, method="best_fit")
    # Assert: a document of length l appears in exactly ceil(l / L) pieces (1 when l <= L).
    pieces = np.bincount([seg.doc_id for seq in sequences for seg in seq], minlength=lengths.size)
    assert pieces.tolist() == (-(-lengths // capacity)).tolist()


def test_documents_given_as_token_lists_pack_like_their_lengths() -> None:
    # Prepare
    documents = [[1] * 14, [2] * 7, [3] * 5, [4] * 2, [5] * 3]
    # Execute
    from_tokens = pack_documents(documents, 8)
    from_lengths = pack_documents([14, 7, 5, 2, 3], 8)
    # Assert
    assert from_tokens == from_lengths


def test_figure_1_example_truncation_statistics() -> None:
    # Prepare: Figure 1 of the paper, documents of 14, 7, 5, 2 and 3 tokens, L = 8.
    lengths, capacity = [14, 7, 5, 2, 3], 8
    # Execute
    stats = {m: PackingStats.from_sequences(pack_documents(lengths, capacity, m), lengths, capacity) for m in METHODS}
    # Assert: concatenation truncates 3 of 5 documents, best fit only the unavoidable one.
    assert stats["concat"].truncated_share == pytest.approx(3 / 5)
    assert stats["best_fit"].truncated_share == pytest.approx(1 / 5)
    assert stats["best_fit"].n_sequences == stats["concat"].n_sequences == stats["best_fit"].lower_bound == 4
    assert stats["pad"].n_sequences == 6
    assert stats["pad"].padding_share == pytest.approx(1 - 31 / 48)


def test_best_fit_sequence_count_is_within_0_01_percent_of_lower_bound() -> None:
    # Prepare: heavy-tailed documents (log-normal, median 450, mean 825), L = 2048. 100,000 of
    # them, because with 20,000 (about 8,000 sequences) 0.01% is under one sequence.
    capacity = 2048
    lengths = lognormal_document_lengths(100_000, np.random.default_rng(2024))
    # Execute
    best_fit = PackingStats.from_sequences(pack_documents(lengths, capacity, "best_fit"), lengths, capacity)
    concat = PackingStats.from_sequences(pack_documents(lengths, capacity, "concat"), lengths, capacity)
    # Assert: as many sequences as concatenation, far fewer truncations.
    assert best_fit.n_sequences <= best_fit.lower_bound * 1.0001
    assert concat.n_sequences == concat.lower_bound
    assert best_fit.fill_rate > 0.9999
    assert best_fit.truncated_share == pytest.approx(best_fit.forced_truncated_share)
    assert concat.truncated_share > 3 * best_fit.truncated_share


def test_buffered_packing_streams_and_keeps_buffers_apart() -> None:
    # Prepare: a generator, so the packer cannot look ahead beyond one buffer.
    lengths, capacity, buffer_size = small_random_lengths(seed=6), 64, 50
    # Execute
    sequences = list(iter_packed_sequences((int(n) for n in lengths), capacity, "best_fit", buffer_size))
    # Assert: each sequence holds documents of one buffer, and nothing is lost or repeated.
    assert all(len({seg.doc_id // buffer_size for seg in seq}) == 1 for seq in sequences)
    assert np.all(token_coverage(sequences, lengths) == 1)
    assert len(sequences) >= len(pack_documents(lengths, capacity, "best_fit"))


def concatenate_then_split(lengths: np.ndarray, capacity: int) -> list[list[Segment]]:
    """Reference concatenation: walk the stream token by token, cutting every `capacity` tokens."""
    stream = [(doc_id, position) for doc_id, length in enumerate(lengths.tolist()) for position in range(length)]
    sequences = []
    for begin in range(0, len(stream), capacity):
        sequence: list[Segment] = []
        for doc_id, position in stream[begin: begin + capacity]:
            if sequence and sequence[-1].doc_id == doc_id:
                sequence[-1] = Segment(doc_id, sequence[-1].start, position + 1)
            else:
                sequence.append(Segment(doc_id, position, position + 1))
        sequences.append(sequence)
    return sequences


@pytest.mark.parametrize("buffer_size", [None, 1, 7])
def test_concat_equals_a_token_by_token_split_for_any_block_size(buffer_size: int | None) -> None:
    # Prepare: lengths include 0 and exact multiples of the capacity.
    lengths, capacity = np.array([0, 16, 5, 0, 11, 32, 3, 1, 0, 9]), 16
    # Execute
    sequences = pack_documents(lengths, capacity, method="concat", buffer_size=buffer_size)
    # Assert
    assert sequences == concatenate_then_split(lengths, capacity)


@pytest.mark.parametrize("seed", [0, 1])
def test_concat_equals_a_token_by_token_split_on_random_inputs(seed: int) -> None:
    # Prepare: zeros, exact multiples of the capacity and documents longer than it.
    rng = np.random.default_rng(seed)
    capacity = 8
    lengths = rng.choice([0, 1, 3, 8, 16, 19], size=120)
    # Execute
    blocks = {size: pack_documents(lengths, capacity, "concat", size) for size in (None, 1, 5, 64)}
    # Assert
    reference = concatenate_then_split(lengths, capacity)
    assert all(sequences == reference for sequences in blocks.values())


@pytest.mark.parametrize("method", METHODS)
def test_array_and_generator_inputs_stream_the_same_sequences(method: str) -> None:
    # Prepare
    lengths, capacity = small_random_lengths(seed=8), 64
    # Execute
    from_array = list(iter_packed_sequences(lengths, capacity, method, buffer_size=70))
    from_generator = list(iter_packed_sequences((int(n) for n in lengths), capacity, method, buffer_size=70))
    # Assert
    assert from_array == from_generator
    assert np.all(token_coverage(from_array, lengths) == 1)


@pytest.mark.parametrize("method", ["best_fit", "first_fit"])
def test_bin_packed_arrays_hold_the_same_sequences_as_the_segment_lists(method: str) -> None:
    # Prepare
    lengths, capacity, buffer_size = small_random_lengths(seed=9), 64, 90
    # Execute
    arrays = list(iter_bin_packed_arrays(lengths, capacity, method, buffer_size))
    sequences = pack_documents(lengths, capacity, method, buffer_size)
    # Assert
    from_arrays = [[Segment(*row) for row in segments[low:high].tolist()]
                   for segments, offsets in arrays for low, high in zip(offsets[:-1], offsets[1:])]
    assert from_arrays == sequences


def test_packing_leaves_the_garbage_collector_as_it_was() -> None:
    # Prepare / Execute / Assert: the collector is paused only while a buffer's lists are built.
    lengths = small_random_lengths(seed=10)
    assert gc.isenabled()
    for method in METHODS:
        for _ in iter_packed_sequences(lengths, 64, method, buffer_size=100):
            assert gc.isenabled()
    assert gc.isenabled()


def test_pad_puts_one_document_or_chunk_per_sequence() -> None:
    # Prepare
    lengths, capacity = small_random_lengths(seed=7), 64
    # Execute
    sequences = pack_documents(lengths, capacity, method="pad")
    # Assert
    assert all(len(seq) == 1 for seq in sequences)
    assert len(sequences) == int((-(-lengths // capacity)).sum())


def test_position_ids_and_tokens_keep_document_boundaries() -> None:
    # Prepare
    documents = [[11, 12, 13], [21, 22], [31, 32, 33, 34, 35]]
    sequence = [Segment(2, 3, 5), Segment(0, 0, 3)]
    # Execute
    doc_ids = position_document_ids(sequence, capacity=6)
    tokens = materialize_tokens(sequence, documents, capacity=6, pad_id=0)
    # Assert
    assert doc_ids.tolist() == [2, 2, 0, 0, 0, -1]
    assert tokens.tolist() == [34, 35, 11, 12, 13, 0]


def test_items_longer_than_capacity_are_rejected() -> None:
    # Prepare / Execute / Assert: unchunked documents must not be packed silently.
    with pytest.raises(ValueError):
        best_fit_pack([3, 9], capacity=8)
    with pytest.raises(ValueError):
        pack_documents([3, 4], 8, method="next_fit")
