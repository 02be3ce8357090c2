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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from testbed.pretrain.bin_packing import Bins, best_fit_pack, first_fit_decreasing_pack
from testbed.pretrain.packing_stats import PackingStats

if TYPE_CHECKING:
    from testbed.pretrain.token_store import TokenStore

__all__ = [
    "Chunks", "PackingStats", "Segment", "best_fit_pack", "document_lengths", "iter_packed_sequences",
    "materialize_tokens", "pack_documents", "position_document_ids", "split_into_chunks",
]

PAD_DOCUMENT_ID = -1
# concat and pad read the stream in blocks of this many documents. Their output does not depend
# on it (concat carries its open sequence across blocks); it only bounds memory per step.
STREAM_BLOCK_SIZE = 65_536
BIN_PACKERS: dict[str, Callable[[np.ndarray, int], Bins]] = {
    "best_fit": best_fit_pack,
    "first_fit": first_fit_decreasing_pack,
}
METHODS = (*BIN_PACKERS, "concat", "pad")


class Segment(NamedTuple):
    """Tokens [start, end) of document `doc_id`, placed contiguously in a packed sequence."""

    doc_id: int
    start: int
    end: int


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
    return list(iter_packed_sequences(document_lengths(documents).tolist(), capacity, method, buffer_size))


def iter_packed_sequences(
    lengths: Iterable[int], capacity: int, method: str = "best_fit", buffer_size: int | None = None
) -> Iterator[list[Segment]]:
    """Streaming form of `pack_documents` over an iterable of document lengths."""
    if method in BIN_PACKERS:
        return _iter_bin_packed(lengths, capacity, BIN_PACKERS[method], buffer_size)
    if method == "concat":
        return _iter_concatenated(lengths, capacity, buffer_size or STREAM_BLOCK_SIZE)
    if method == "pad":
        return _iter_padded(lengths, capacity, buffer_size or STREAM_BLOCK_SIZE)
    raise ValueError(f"unknown packing method {method!r}; expected one of {METHODS}")


def position_document_ids(sequence: Sequence[Segment], capacity: int) -> np.ndarray:
    """Document id of every position of a packed sequence, PAD_DOCUMENT_ID (-1) on padding.

    Two positions may attend to each other under a document mask iff their ids are equal
    and not -1 (see `testbed.pretrain.attention.document_causal_mask`).
    """
    ids = np.full(capacity, PAD_DOCUMENT_ID, dtype=np.int64)
    offset = 0
    for doc_id, start, end in sequence:
        ids[offset: offset + end - start] = doc_id
        offset += end - start
    return ids


def materialize_tokens(
    sequence: Sequence[Segment], documents: Sequence[Sequence[int]] | TokenStore, capacity: int, pad_id: int
) -> np.ndarray:
    """Token ids of a packed sequence, right-padded with `pad_id` to `capacity`."""
    tokens = np.full(capacity, pad_id, dtype=np.int64)
    offset = 0
    for doc_id, start, end in sequence:
        tokens[offset: offset + end - start] = np.asarray(documents[doc_id][start:end])
        offset += end - start
    return tokens


def _buffers(lengths: Iterable[int], buffer_size: int | None) -> Iterator[tuple[int, list[int]]]:
    # Yields (id of the buffer's first document, lengths in the buffer).
    if buffer_size is None:
        yield 0, list(lengths)
        return
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
    iterator = iter(lengths)
    first_doc_id = 0
    while buffer := list(itertools.islice(iterator, buffer_size)):
        yield first_doc_id, buffer
        first_doc_id += len(buffer)


def _chunk_segments(chunks: Chunks) -> list[Segment]:
    ends = chunks.starts + chunks.lengths
    return list(map(Segment, chunks.doc_ids.tolist(), chunks.starts.tolist(), ends.tolist()))


def _iter_bin_packed(
    lengths: Iterable[int], capacity: int, packer: Callable[[np.ndarray, int], Bins], buffer_size: int | None
) -> Iterator[list[Segment]]:
    for first_doc_id, buffer in _buffers(lengths, buffer_size):
        chunks = split_into_chunks(buffer, capacity, first_doc_id)
        segments = _chunk_segments(chunks)
        for bin_items in packer(chunks.lengths, capacity):
            yield [segments[i] for i in bin_items]


def _iter_concatenated(lengths: Iterable[int], capacity: int, block_size: int) -> Iterator[list[Segment]]:
    # Concatenate-then-split, vectorized per block of documents; the sequence that is still
    # open at the end of a block continues into the next one.
    pending: list[Segment] = []
    pending_sequence = -1
    stream_offset = 0
    for first_doc_id, block in _buffers(lengths, block_size):
        block_lengths = np.asarray(block, dtype=np.int64)
        sequence_ids, segments = _concatenated_segments(block_lengths, first_doc_id, stream_offset, capacity)
        stream_offset += int(block_lengths.sum())
        for low, high in _runs(sequence_ids):
            if sequence_ids[low] != pending_sequence:
                if pending:
                    yield pending
                pending, pending_sequence = [], int(sequence_ids[low])
            pending.extend(segments[low:high])
    if pending:
        yield pending


def _concatenated_segments(
    lengths: np.ndarray, first_doc_id: int, stream_offset: int, capacity: int
) -> tuple[np.ndarray, list[Segment]]:
    # The stream is cut at every document boundary and every multiple of `capacity`; each
    # piece between two consecutive cuts is one segment, in sequence (piece start // capacity).
    doc_starts = stream_offset + np.concatenate([[0], np.cumsum(lengths)])
    first_sequence_cut = -(-stream_offset // capacity) * capacity
    sequence_cuts = np.arange(first_sequence_cut, doc_starts[-1] + 1, capacity)
    cuts = np.union1d(doc_starts, sequence_cuts)
    piece_starts, piece_ends = cuts[:-1], cuts[1:]
    # The last document starting at or before a piece's start is the non-empty one holding it.
    local_doc = np.searchsorted(doc_starts, piece_starts, side="right") - 1
    offsets = doc_starts[local_doc]
    segments = list(map(Segment, (local_doc + first_doc_id).tolist(), (piece_starts - offsets).tolist(),
                        (piece_ends - offsets).tolist()))
    return piece_starts // capacity, segments


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    # [low, high) index ranges of the runs of equal consecutive values.
    bounds = [0, *(np.flatnonzero(np.diff(values)) + 1).tolist(), len(values)]
    return list(zip(bounds[:-1], bounds[1:])) if len(values) else []


def _iter_padded(lengths: Iterable[int], capacity: int, block_size: int) -> Iterator[list[Segment]]:
    # One document (or one chunk of a long document) per sequence; the rest is padding.
    for first_doc_id, block in _buffers(lengths, block_size):
        for segment in _chunk_segments(split_into_chunks(block, capacity, first_doc_id)):
            yield [segment]
