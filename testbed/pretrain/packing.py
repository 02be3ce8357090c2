"""Document packing for pretraining: Best-fit Packing and its two baselines.

Implements Ding et al. (ICML 2024), "Fewer Truncations Improve Language Modeling":
  step 1 (`split_into_chunks`): a document longer than the context length L is cut into full
          L-token chunks plus one remainder; shorter documents are never cut;
  step 2 (`best_fit_pack`): chunks are packed into sequences of L tokens by Best-Fit Decreasing.
Baselines: "concat" (concatenate all documents, then split every L tokens) and "pad" (one
document per sequence, padded; a document longer than L is chunked as in step 1, so no method
drops tokens). "first_fit" (First-Fit Decreasing over the same chunks) is there for comparison.

A packed sequence is a list of `Segment(doc_id, start, end)`: tokens [start, end) of document
`doc_id`. Keeping the boundaries lets a trainer build a block-diagonal document mask
(`position_document_ids`). Bin-packing methods stream in buffers of `buffer_size` documents,
each packed on its own; concat and pad stream too, and give the same output for any buffer size.
The array path is the primary one: `pack_arrays` returns a whole packing as columns
(`PackedArrays`: document, start and end per piece, and each sequence's range of pieces), for
every method, without one Python object per piece; the corpus preparation and the report use it.
`PackedArrays.segments` builds the Segment lists for the callers that ask for them
(`pack_documents`, `iter_packed_sequences`). `iter_bin_packed_arrays` yields the bin packings
as (doc_id, start, end) rows one buffer at a time, for streams longer than memory.

Speed: every step is vectorized per buffer (`bin_packing.best_fit_pack_arrays` places all chunks
of one length at once; concat is one pass of cumulative sums and floor divisions), so the arrays
cost about 0.3 us per document at 10^7 documents, and building Segment lists about 1 us more.
See benchmarks/bench_packing.py and docs/performance.md.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from testbed.pretrain.bin_packing import PackedBins, best_fit_pack, best_fit_pack_arrays, first_fit_decreasing_pack
from testbed.pretrain.packing_stats import PackingStats

if TYPE_CHECKING:
    from testbed.pretrain.token_store import TokenStore

__all__ = [
    "Chunks", "PackedArrays", "PackingStats", "Segment", "best_fit_pack", "document_lengths", "iter_bin_packed_arrays",
    "iter_packed_sequences", "materialize_tokens", "pack_arrays", "pack_documents", "position_document_ids",
    "split_into_chunks",
]

PAD_DOCUMENT_ID = -1
# concat and pad read the stream in blocks of this many documents. Their output does not depend
# on it (concat carries its open sequence across blocks); it only bounds memory per step.
STREAM_BLOCK_SIZE = 65_536
BIN_PACKERS: dict[str, Callable[[np.ndarray, int], PackedBins]] = {
    "best_fit": best_fit_pack_arrays,
    "first_fit": lambda lengths, capacity: PackedBins.from_lists(first_fit_decreasing_pack(lengths, capacity)),
}
METHODS = (*BIN_PACKERS, "concat", "pad")


class Segment(NamedTuple):
    """Tokens [start, end) of document `doc_id`, placed contiguously in a packed sequence."""

    doc_id: int
    start: int
    end: int


class PackedArrays(NamedTuple):
    """A packing as columns: piece j is tokens [starts[j], ends[j]) of document doc_ids[j], and
    sequence i is the pieces offsets[i]:offsets[i + 1], in placement order (all int64)."""

    doc_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    offsets: np.ndarray

    @property
    def n_sequences(self) -> int:
        """Number of packed sequences."""
        return self.offsets.size - 1

    def rows(self) -> np.ndarray:
        """The pieces as an (n, 3) array of (doc_id, start, end) rows."""
        return np.stack([self.doc_ids, self.starts, self.ends], axis=1)

    def sequence_tokens(self) -> np.ndarray:
        """Document tokens in each sequence (the rest of its `capacity` is padding)."""
        tokens = np.concatenate([[0], np.cumsum(self.ends - self.starts)])
        return np.diff(tokens[self.offsets])

    def segments(self) -> list[list[Segment]]:
        """The same packing as one list of Segments per sequence."""
        with _gc_paused():
            return _slices(_segment_list(self.doc_ids, self.starts, self.ends), self.offsets.tolist())

    @classmethod
    def concatenate(cls, parts: Sequence[PackedArrays]) -> PackedArrays:
        """The packings `parts` one after the other (their sequences in order)."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return _empty_packing()
        # Each part's offsets start at 0: shift them by the pieces of the parts before it.
        shifts = np.cumsum([0] + [part.doc_ids.size for part in parts[:-1]])
        offsets = np.concatenate([[0]] + [part.offsets[1:] + shift for part, shift in zip(parts, shifts)])
        doc_ids, starts, ends = (np.concatenate([part[column] for part in parts]) for column in range(3))
        return cls(doc_ids, starts, ends, offsets.astype(np.int64))


def _empty_packing() -> PackedArrays:
    empty = np.zeros(0, dtype=np.int64)
    return PackedArrays(empty, empty, empty, np.zeros(1, dtype=np.int64))


@dataclass(frozen=True)
class Chunks:
    """Chunks produced by step 1: chunk i is tokens [starts[i], starts[i] + lengths[i]) of doc_ids[i]."""

    doc_ids: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray


def split_into_chunks(lengths: Sequence[int] | np.ndarray, capacity: int, first_doc_id: int = 0) -> Chunks:
    """Step 1 of Best-fit Packing: cut each document into ceil(length / capacity) chunks.

    Chunks of one document are full `capacity`-token chunks followed by the remainder, so a
    document of length <= capacity stays whole; empty documents yield no chunk.
    """
    doc_lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if capacity < 1 or (doc_lengths.size and doc_lengths.min() < 0):
        raise ValueError("capacity must be >= 1 and document lengths >= 0")
    chunks_per_doc = -(-doc_lengths // capacity)
    local_doc = np.repeat(np.arange(doc_lengths.size), chunks_per_doc)
    first_chunk_of_doc = np.cumsum(chunks_per_doc) - chunks_per_doc
    rank_in_doc = np.arange(local_doc.size) - first_chunk_of_doc[local_doc]
    starts = rank_in_doc * capacity
    chunk_lengths = np.minimum(capacity, doc_lengths[local_doc] - starts)
    return Chunks(local_doc + first_doc_id, starts, chunk_lengths)


def document_lengths(documents: Sequence[Sequence[int]] | Sequence[int] | np.ndarray) -> np.ndarray:
    """Lengths of `documents`, given either as token sequences or directly as integer lengths."""
    if isinstance(documents, np.ndarray) and documents.ndim == 1 and documents.dtype.kind in "iu":
        return documents.astype(np.int64)
    if len(documents) and isinstance(documents[0], (int, np.integer)):
        return np.asarray(documents, dtype=np.int64)
    sequences = cast(Sequence[Sequence[int]], documents)  # token sequences: lengths are handled above
    return np.fromiter((len(doc) for doc in sequences), dtype=np.int64, count=len(sequences))


def pack_documents(
    documents: Sequence[Sequence[int]] | Sequence[int] | np.ndarray,
    capacity: int,
    method: str = "best_fit",
    buffer_size: int | None = None,
) -> list[list[Segment]]:
    """Pack documents (token lists or lengths) into sequences of at most `capacity` tokens.

    `method` is one of "best_fit" (the paper), "first_fit", "concat" or "pad". With
    `buffer_size`, bin-packing methods pack each run of that many documents separately
    (for concat and pad it only sets the streaming block size).
    """
    return list(iter_packed_sequences(document_lengths(documents), capacity, method, buffer_size))


def pack_arrays(
    documents: Sequence[Sequence[int]] | Sequence[int] | np.ndarray | Iterable[int],
    capacity: int,
    method: str = "best_fit",
    buffer_size: int | None = None,
) -> PackedArrays:
    """`pack_documents` as columns: the same sequences, with no Python object per piece.

    Takes documents (token lists or lengths) or any iterable of lengths; `method` and
    `buffer_size` mean what they mean for `pack_documents`.
    """
    if isinstance(documents, (np.ndarray, Sequence)):
        lengths = document_lengths(cast(Sequence[int], documents))
    else:
        lengths = np.fromiter(documents, dtype=np.int64)
    if method in BIN_PACKERS:
        packer = BIN_PACKERS[method]
        return PackedArrays.concatenate([_bin_packed_arrays(buffer, first_doc_id, capacity, packer)
                                         for first_doc_id, buffer in _buffers(lengths, buffer_size)])
    if method == "concat":
        # concat's output does not depend on the buffer size: the whole stream is one pass.
        sequence_ids, pieces = _concatenated_pieces(lengths, 0, 0, capacity)
        if not sequence_ids.size:
            return _empty_packing()
        run_starts = np.flatnonzero(np.diff(sequence_ids)) + 1
        return PackedArrays(*pieces, np.concatenate([[0], run_starts, [sequence_ids.size]]).astype(np.int64))
    if method == "pad":
        chunks = split_into_chunks(lengths, capacity)
        offsets = np.arange(chunks.doc_ids.size + 1, dtype=np.int64)
        return PackedArrays(chunks.doc_ids, chunks.starts, chunks.starts + chunks.lengths, offsets)
    raise ValueError(f"unknown packing method {method!r}; expected one of {METHODS}")


def iter_packed_sequences(
    lengths: Iterable[int], capacity: int, method: str = "best_fit", buffer_size: int | None = None
) -> Iterator[list[Segment]]:
    """Streaming form of `pack_documents` over an iterable (or array) of document lengths."""
    if method in BIN_PACKERS:
        return _iter_bin_packed(lengths, capacity, BIN_PACKERS[method], buffer_size)
    if method == "concat":
        return _iter_concatenated(lengths, capacity, buffer_size or STREAM_BLOCK_SIZE)
    if method == "pad":
        return _iter_padded(lengths, capacity, buffer_size or STREAM_BLOCK_SIZE)
    raise ValueError(f"unknown packing method {method!r}; expected one of {METHODS}")


def position_document_ids(sequence: Sequence[Segment] | np.ndarray, capacity: int) -> np.ndarray:
    """Document id of every position of a packed sequence, PAD_DOCUMENT_ID (-1) on padding.

    `sequence` is a list of Segments or an (n, 3) array of (doc_id, start, end) rows. Two
    positions may attend to each other under a document mask iff their ids are equal and not -1
    (see `testbed.pretrain.attention.document_causal_mask`).
    """
    ids = np.full(capacity, PAD_DOCUMENT_ID, dtype=np.int64)
    offset = 0
    for doc_id, start, end in _segment_rows(sequence):
        ids[offset: offset + end - start] = doc_id
        offset += end - start
    return ids


def materialize_tokens(
    sequence: Sequence[Segment] | np.ndarray, documents: Sequence[Sequence[int]] | TokenStore, capacity: int,
    pad_id: int,
) -> np.ndarray:
    """Token ids of a packed sequence (Segments or (doc_id, start, end) rows), right-padded with `pad_id`."""
    tokens = np.full(capacity, pad_id, dtype=np.int64)
    offset = 0
    for doc_id, start, end in _segment_rows(sequence):
        tokens[offset: offset + end - start] = np.asarray(documents[doc_id][start:end])
        offset += end - start
    return tokens


def iter_bin_packed_arrays(
    lengths: Iterable[int], capacity: int, method: str = "best_fit", buffer_size: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The bin packing of `iter_packed_sequences` one buffer at a time, as arrays.

    Yields (segments, offsets) per buffer: `segments` is an (n, 3) int64 array of
    (doc_id, start, end) rows, and that buffer's sequence i is rows offsets[i]:offsets[i + 1].
    """
    if method not in BIN_PACKERS:
        raise ValueError(f"iter_bin_packed_arrays packs with one of {tuple(BIN_PACKERS)}, not {method!r}")
    for first_doc_id, buffer in _buffers(lengths, buffer_size):
        # The work is in a function so that nothing of one buffer outlives its yield (memory
        # stays at one buffer, whatever the stream's length).
        yield _bin_packed_rows(buffer, first_doc_id, capacity, BIN_PACKERS[method])


def _segment_rows(sequence: Sequence[Segment] | np.ndarray) -> Iterable[Sequence[int]]:
    # Rows of an array as lists of Python ints (slicing and indexing with them is the cheap path).
    return sequence.tolist() if isinstance(sequence, np.ndarray) else sequence


def _bin_packed_arrays(
    buffer: np.ndarray, first_doc_id: int, capacity: int, packer: Callable[[np.ndarray, int], PackedBins]
) -> PackedArrays:
    # One buffer's pieces in sequence order: chunk, pack the chunk lengths, gather by the packing.
    chunks = split_into_chunks(buffer, capacity, first_doc_id)
    packed = packer(chunks.lengths, capacity)
    starts = chunks.starts[packed.items]
    return PackedArrays(chunks.doc_ids[packed.items], starts, starts + chunks.lengths[packed.items], packed.offsets)


def _bin_packed_rows(
    buffer: np.ndarray, first_doc_id: int, capacity: int, packer: Callable[[np.ndarray, int], PackedBins]
) -> tuple[np.ndarray, np.ndarray]:
    # One buffer's (doc_id, start, end) rows in sequence order, and its sequence offsets.
    packed = _bin_packed_arrays(buffer, first_doc_id, capacity, packer)
    return packed.rows(), packed.offsets


def _buffers(lengths: Iterable[int], buffer_size: int | None) -> Iterator[tuple[int, np.ndarray]]:
    # Yields (id of the buffer's first document, lengths in the buffer); an array is sliced,
    # any other iterable is read one buffer at a time.
    if buffer_size is not None and buffer_size < 1:
        raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
    if isinstance(lengths, np.ndarray):
        step = buffer_size or max(lengths.size, 1)
        for low in range(0, lengths.size, step):
            yield low, lengths[low: low + step]
        if not lengths.size and buffer_size is None:
            yield 0, lengths
        return
    if buffer_size is None:
        yield 0, np.fromiter(lengths, dtype=np.int64)
        return
    iterator = iter(lengths)
    first_doc_id = 0
    while (buffer := np.fromiter(itertools.islice(iterator, buffer_size), dtype=np.int64)).size:
        yield first_doc_id, buffer
        first_doc_id += buffer.size


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Building a buffer's segment lists allocates one tuple per segment and one list per
    # sequence, none of them cyclic; left on, the cyclic collector would rescan every live
    # object many times over (measured: half of best_fit's end-to-end time at 200k documents).
    # Never held across a `yield`: the caller's code runs with the collector as it left it.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Segment(*row) without the Python-level __new__ of a NamedTuple: tuple.__new__(Segment, row) runs in C.
_new_segment = partial(tuple.__new__, Segment)


def _segment_list(doc_ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[Segment]:
    return list(map(_new_segment, zip(doc_ids.tolist(), starts.tolist(), ends.tolist())))


def _slices(segments: list[Segment], bounds: list[int]) -> list[list[Segment]]:
    # segments[bounds[i]:bounds[i + 1]] for every i, without a Python-level loop.
    return list(map(segments.__getitem__, map(slice, bounds[:-1], bounds[1:])))


def _chunk_segments(chunks: Chunks) -> list[Segment]:
    return _segment_list(chunks.doc_ids, chunks.starts, chunks.starts + chunks.lengths)


def _iter_bin_packed(
    lengths: Iterable[int], capacity: int, packer: Callable[[np.ndarray, int], PackedBins], buffer_size: int | None
) -> Iterator[list[Segment]]:
    for first_doc_id, buffer in _buffers(lengths, buffer_size):
        # Held only by the `yield from`, so one buffer's lists are freed before the next is built.
        yield from _bin_packed_sequences(buffer, first_doc_id, capacity, packer)


def _bin_packed_sequences(
    buffer: np.ndarray, first_doc_id: int, capacity: int, packer: Callable[[np.ndarray, int], PackedBins]
) -> list[list[Segment]]:
    # Pieces already in sequence order, so each sequence is one slice of the segment list.
    return _bin_packed_arrays(buffer, first_doc_id, capacity, packer).segments()


def _iter_concatenated(lengths: Iterable[int], capacity: int, block_size: int) -> Iterator[list[Segment]]:
    # Concatenate-then-split, vectorized per block of documents; the sequence that is still
    # open at the end of a block continues into the next one.
    pending: list[Segment] = []
    pending_sequence = -1
    stream_offset = 0
    for first_doc_id, block in _buffers(lengths, block_size):
        with _gc_paused():
            sequence_ids, segments = _concatenated_segments(block, first_doc_id, stream_offset, capacity)
            bounds = _runs(sequence_ids)
            complete = _slices(segments, bounds[1:-1]) if len(bounds) > 3 else []
        stream_offset += int(block.sum())
        if not segments:
            continue
        if sequence_ids[0] != pending_sequence:
            if pending:
                yield pending
            pending = []
        pending.extend(segments[: bounds[1]])
        # Every run but the last is a complete sequence; the last may continue in the next block.
        if len(bounds) > 2:
            yield pending
            yield from complete
            pending = segments[bounds[-2]:]
        pending_sequence = int(sequence_ids[-1])
        del segments, complete  # one block's lists at a time
    if pending:
        yield pending


def _concatenated_segments(
    lengths: np.ndarray, first_doc_id: int, stream_offset: int, capacity: int
) -> tuple[np.ndarray, list[Segment]]:
    sequence, pieces = _concatenated_pieces(lengths, first_doc_id, stream_offset, capacity)
    return sequence, _segment_list(*pieces)


def _concatenated_pieces(
    lengths: np.ndarray, first_doc_id: int, stream_offset: int, capacity: int
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    # The sequence of every piece, and the pieces' (doc_id, start, end) columns.
    # The stream is cut at every multiple of `capacity`: a document on stream tokens [s, e)
    # falls into sequences s // L .. (e - 1) // L, and its piece in sequence q is
    # [max(s, q L), min(e, (q + 1) L)). One pass of cumulative sums and floor divisions, no sort.
    lengths = np.asarray(lengths, dtype=np.int64)
    doc_ends = stream_offset + np.cumsum(lengths)
    doc_starts = doc_ends - lengths
    first_sequence = doc_starts // capacity
    n_pieces = np.where(lengths > 0, (doc_ends - 1) // capacity - first_sequence + 1, 0)
    local_doc = np.repeat(np.arange(lengths.size), n_pieces)
    first_piece = np.cumsum(n_pieces) - n_pieces
    sequence = first_sequence[local_doc] + np.arange(local_doc.size) - first_piece[local_doc]
    offsets = doc_starts[local_doc]
    starts = np.maximum(offsets, sequence * capacity) - offsets
    ends = np.minimum(doc_ends[local_doc], (sequence + 1) * capacity) - offsets
    return sequence, (local_doc + first_doc_id, starts, ends)


def _runs(values: np.ndarray) -> list[int]:
    # Bounds [0, ..., len] of the runs of equal consecutive values (run i is bounds[i]:bounds[i + 1]).
    return [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]


def _iter_padded(lengths: Iterable[int], capacity: int, block_size: int) -> Iterator[list[Segment]]:
    # One document (or one chunk of a long document) per sequence; the rest is padding.
    for first_doc_id, block in _buffers(lengths, block_size):
        with _gc_paused():
            sequences = [[segment] for segment in _chunk_segments(split_into_chunks(block, capacity, first_doc_id))]
        yield from sequences
