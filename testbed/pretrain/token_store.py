"""Tokenized documents on disk as memory-mapped arrays, so that a corpus larger than memory streams.

A store is two files beside each other::

    NAME.tokens.bin    every document's token ids, one after another (uint16, or uint32 for big vocabularies)
    NAME.offsets.npy   int64 [n_documents + 1]: document i is tokens[offsets[i]:offsets[i + 1]]

`TokenStoreWriter` appends documents batch by batch (memory use is one batch); `TokenStore` maps
the token file read-only, so reading document i touches only its pages.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every token id."""
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def store_paths(prefix: Path) -> tuple[Path, Path]:
    """The token file and the offsets file of the store named ``prefix``."""
    return prefix.with_name(prefix.name + ".tokens.bin"), prefix.with_name(prefix.name + ".offsets.npy")


class TokenStoreWriter:
    """Appends tokenized documents to a new store; `close` writes the offsets and publishes both files."""

    def __init__(self, prefix: Path, vocab_size: int):
        self.tokens_path, self.offsets_path = store_paths(prefix)
        self.vocab_size = vocab_size
        self.dtype = token_dtype(vocab_size)
        self._partial = self.tokens_path.with_name("." + self.tokens_path.name + ".partial")
        self._handle = open(self._partial, "wb")
        self._offsets = [0]

    def extend(self, documents: Iterable[Sequence[int]]) -> None:
        """Append a batch of documents (lists of token ids)."""
        for document in documents:
            array = np.asarray(document, dtype=self.dtype)
            self._handle.write(array.tobytes())
            self._offsets.append(self._offsets[-1] + array.size)

    def close(self) -> TokenStore:
        """Flush to disk, then rename into place; returns the store opened for reading."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        np.save(self.offsets_path, np.asarray(self._offsets, dtype=np.int64))
        os.replace(self._partial, self.tokens_path)
        return TokenStore(self.tokens_path.with_name(self.tokens_path.name.removesuffix(".tokens.bin")),
                          self.vocab_size)


class TokenStore:
    """Read-only view of a store: ``store[i]`` is document i's token ids (a memory-mapped slice)."""

    def __init__(self, prefix: Path, vocab_size: int):
        tokens_path, offsets_path = store_paths(prefix)
        self.offsets = np.load(offsets_path, mmap_mode="r")
        dtype = token_dtype(vocab_size)
        # np.memmap refuses empty files; an empty store needs no mapping.
        self.tokens = np.memmap(tokens_path, dtype=dtype, mode="r") if tokens_path.stat().st_size else \
            np.zeros(0, dtype=dtype)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        return self.tokens[int(self.offsets[index]): int(self.offsets[index + 1])]

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document (int64)."""
        return np.diff(np.asarray(self.offsets))

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])
