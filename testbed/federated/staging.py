"""A round's uploads, staged as they arrive and averaged in partition order: memory flat in the client count.

A FedAvg-family round at 10^5 clients receives 10^5 models (8.7 GB for the digits CNN); holding
them as Flower messages until the round ends does not fit a laptop. Folding each reply into a
running sum as it arrives would, but floating-point sums depend on their order, and replies
arrive in the random order of Flower's node ids: the same seed would give other bits on every run
and engine. So `StagedUploads` keeps each upload's raw array bytes, in memory up to a byte budget
and beyond it appended to an unnamed temporary file (gone when closed or when the process dies;
the page cache, not the process, holds what the disk has not yet written), and `weighted_mean`
folds them in partition-id order with exactly the arithmetic of Flower's
`aggregate_arrayrecords` (each array times its weight ``n_i / sum n``, added in place): the
result is bit-identical to Flower's FedAvg over the replies sorted by partition id, which is what
the round loop computes at small scale (tests/federated/test_federation_scale.py).

The bytes kept per client are the model's (no message, metadata or Python objects), so a
streamed round's memory is the budget plus a few numbers per client.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from flwr.app import Array, ArrayRecord

# Uploads kept in memory before the rest go to disk (about 3,000 digits-CNN models).
MEMORY_BUDGET_BYTES = 256 << 20


@dataclass(frozen=True)
class ArrayLayout:
    """Where one named array sits in an upload's bytes, and the .npy header Flower's `Array` carries
    it with (an upload whose header is the same byte for byte holds the same dtype, shape and order)."""

    key: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    npy_header: bytes


class StagedUploads:
    """The uploaded arrays of one round, keyed by partition id; use as a context manager."""

    def __init__(self, spill_dir: Path | None = None, budget_bytes: int = MEMORY_BUDGET_BYTES):
        self.spill_dir, self.budget_bytes = spill_dir, budget_bytes
        self.layout: list[ArrayLayout] | None = None
        self.row_bytes = 0
        self._memory: dict[int, bytes] = {}
        self._offsets: dict[int, int] = {}  # partition id -> offset in the spill file
        self._spill: IO[bytes] | None = None
        self._spill_end = 0

    def __enter__(self) -> StagedUploads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._memory.clear()

    def __len__(self) -> int:
        return len(self._memory) + len(self._offsets)

    @property
    def spilled(self) -> int:
        """How many uploads went to disk."""
        return len(self._offsets)

    def add(self, partition: int, arrays: ArrayRecord) -> None:
        """Stage one client's upload (its arrays must have the first upload's names, types and shapes)."""
        if partition in self._memory or partition in self._offsets:
            raise ValueError(f"client {partition} uploaded twice in one round")
        row = self._row(arrays)
        if (len(self._memory) + 1) * self.row_bytes <= self.budget_bytes:
            self._memory[partition] = row
            return
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(dir=self.spill_dir, prefix="uploads-")  # closed in close()
        os.pwrite(self._spill.fileno(), row, self._spill_end)
        self._offsets[partition] = self._spill_end
        self._spill_end += len(row)

    def _row(self, arrays: ArrayRecord) -> bytes:
        if self.layout is None:
            self.layout = self._learn_layout(arrays)
            self.row_bytes = sum(part.nbytes for part in self.layout)
        if list(arrays) != [part.key for part in self.layout]:
            raise ValueError("an upload's arrays differ from the first upload's (names)")
        return b"".join(self._raw(arrays[part.key], part) for part in self.layout)

    @staticmethod
    def _learn_layout(arrays: ArrayRecord) -> list[ArrayLayout]:
        layout, offset = [], 0
        for key, array in arrays.items():
            value = array.numpy()
            header = array.data[:len(array.data) - value.nbytes]
            if array.data[len(header):] != value.tobytes():  # not C order: `_raw` decodes each upload
                header = b""
            layout.append(ArrayLayout(key, value.dtype, value.shape, offset, value.nbytes, header))
            offset += value.nbytes
        return layout

    @staticmethod
    def _raw(array: Array, part: ArrayLayout) -> bytes:
        """The array's values in C order: the bytes after Flower's .npy header when the header is the
        first upload's (decoding it again costs more than the rest of staging), else decoded."""
        if part.npy_header and array.data[:len(part.npy_header)] == part.npy_header \
                and len(array.data) == len(part.npy_header) + part.nbytes:
            return array.data[len(part.npy_header):]
        value = array.numpy()
        if value.dtype != part.dtype or value.shape != part.shape:
            raise ValueError("an upload's arrays differ from the first upload's (types or shapes)")
        return value.tobytes()

    def _read(self, partition: int) -> bytes:
        if partition in self._memory:
            return self._memory[partition]
        assert self._spill is not None  # staged on disk
        return os.pread(self._spill.fileno(), self.row_bytes, self._offsets[partition])

    def weighted_mean(self, partitions: Sequence[int], weights: Sequence[float]) -> ArrayRecord:
        """Flower's `aggregate_arrayrecords` over these uploads in this order with these weights:
        each array times ``w_i / sum(w)``, folded in place, in the same numpy operations."""
        assert self.layout is not None and partitions  # at least one upload
        total = sum(weights)
        aggregated: dict[str, np.ndarray] = {}
        for partition, weight in zip(partitions, weights, strict=True):
            factor = weight / total
            row = self._read(partition)
            for part in self.layout:
                count = part.nbytes // part.dtype.itemsize
                value = np.frombuffer(row, part.dtype, count=count, offset=part.offset).reshape(part.shape)
                if part.key not in aggregated:
                    aggregated[part.key] = value * factor
                else:
                    aggregated[part.key] += value * factor
        return ArrayRecord({key: Array(np.asarray(value)) for key, value in aggregated.items()})
