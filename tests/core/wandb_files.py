"""Read the records of an offline W&B run file (``run-<id>.wandb``), for tests.

The wandb package no longer ships a Python reader of its own files (its Go core writes them), so
this follows the format it documents in its protobuf and store: a 7-byte header (``:W&B``, magic
0xBEE1, version 0), then LevelDB log blocks of 32 KiB whose chunks (crc32, length, type: full, first,
middle, last) carry serialised ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

HEADER = 7
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[object]:
    """Every ``Record`` of the file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    for payload in _payloads(data):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # generated, without stubs
        record.ParseFromString(payload)
        yield record


def _payloads(data: bytes) -> Iterator[bytes]:
    offset, pending = HEADER, b""
    while offset + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < CHUNK_HEADER:  # the block's tail is padding
            offset += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + CHUNK_HEADER])
        chunk = data[offset + CHUNK_HEADER:offset + CHUNK_HEADER + length]
        offset += CHUNK_HEADER + length
        if kind == 0 and length == 0:
            break  # zeros at the end of an unfinished block
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            yield pending
            pending = b""
