"""Statistics of a packing: sequence count against its lower bound, fill, and truncations.

The quantities follow Ding et al. (ICML 2024): the number of training sequences compared with
ceil(total tokens / L) (which concatenation attains), the share of padding, and how often
documents are truncated, i.e. spread over more than one sequence. Truncations that cannot be
avoided (a document longer than L needs at least ceil(l / L) - 1 cuts) are reported alongside.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class PackingStats:
    """Summary of one packing of `n_documents` documents into sequences of `capacity` tokens."""

    n_documents: int
    n_tokens: int
    capacity: int
    n_sequences: int
    lower_bound: int  # ceil(n_tokens / capacity): no packing can use fewer sequences
    excess_sequence_share: float  # n_sequences / lower_bound - 1
    fill_rate: float  # document tokens / (n_sequences * capacity)
    padding_share: float  # 1 - fill_rate
    truncated_share: float  # documents spread over more than one sequence / n_documents
    truncations_per_document: float  # sum over documents of (pieces - 1) / n_documents
    forced_truncated_share: float  # documents longer than capacity / n_documents
    forced_truncations_per_document: float  # sum of (ceil(length / capacity) - 1) / n_documents

    @classmethod
    def from_sequences(
        cls, sequences: Sequence[Sequence[tuple[int, int, int]]], lengths: Sequence[int] | np.ndarray, capacity: int
    ) -> PackingStats:
        """Compute the statistics of `sequences` (lists of (doc_id, start, end) segments)."""
        segment_docs = np.fromiter((segment[0] for seq in sequences for segment in seq), dtype=np.int64)
        return cls.from_segment_documents(segment_docs, len(sequences), lengths, capacity)

    @classmethod
    def from_segment_documents(
        cls, segment_docs: Sequence[int] | np.ndarray, n_sequences: int, lengths: Sequence[int] | np.ndarray,
        capacity: int,
    ) -> PackingStats:
        """The same statistics from the document of every segment and the number of sequences (what a
        stored packing's arrays hold, without building its sequences)."""
        doc_lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        n_documents = doc_lengths.size
        n_tokens = int(doc_lengths.sum())
        pieces = np.bincount(np.asarray(segment_docs, dtype=np.int64).reshape(-1), minlength=n_documents)
        cuts = np.maximum(pieces - 1, 0)
        forced_cuts = np.maximum(-(-doc_lengths // capacity) - 1, 0)
        lower_bound = -(-n_tokens // capacity)
        fill_rate = n_tokens / (n_sequences * capacity) if n_sequences else 1.0
        return cls(
            n_documents=n_documents,
            n_tokens=n_tokens,
            capacity=capacity,
            n_sequences=n_sequences,
            lower_bound=lower_bound,
            excess_sequence_share=n_sequences / lower_bound - 1 if lower_bound else 0.0,
            fill_rate=fill_rate,
            padding_share=1.0 - fill_rate,
            truncated_share=_share(int(np.count_nonzero(cuts)), n_documents),
            truncations_per_document=_share(int(cuts.sum()), n_documents),
            forced_truncated_share=_share(int(np.count_nonzero(forced_cuts)), n_documents),
            forced_truncations_per_document=_share(int(forced_cuts.sum()), n_documents),
        )

    def as_dict(self) -> dict[str, float]:
        """Plain dict, for reports and JSON."""
        return asdict(self)


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0
