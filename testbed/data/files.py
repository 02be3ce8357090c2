"""Loaders for the real large datasets from local files; nothing is ever downloaded.

- CIFAR-10: the official python batches (``data_batch_1`` .. ``data_batch_5``, ``test_batch``) in a
  folder ``cifar-10-batches-py`` (pass that folder or its parent).
- Fashion-MNIST: the IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each plain or ``.gz``.
- FEMNIST: LEAF's JSON shards (a folder of ``*.json`` with ``users`` and ``user_data``); besides the
  `Dataset`, `load_femnist_with_writers` returns LEAF's natural per-writer partition.

Every loader returns a `Dataset` of float32 images in [0, 1], (C, H, W) layout, and int64 labels.
CIFAR-10 and Fashion-MNIST take ``split`` = "train", "test" or "all" (train then test, for runs that
split the data themselves, which is what `load_dataset_from` gives). Usage::

    data = load_dataset_from("cifar10", Path("~/data/cifar-10-batches-py").expanduser())
"""

from __future__ import annotations

import gzip
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np

from testbed.data.datasets import Dataset
from testbed.errors import UserError

try:  # numpy >= 2 moved the core module; pickles may name either spelling
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]  # the same function, older path

Split = Literal["train", "test", "all"]
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = ("test_batch",)
FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
FEMNIST_CLASSES = 62  # 10 digits, 26 upper-case and 26 lower-case letters
# What a truncated, foreign or refused pickle raises while being read as a CIFAR-10 batch.
_NOT_A_BATCH = (pickle.UnpicklingError, AttributeError, TypeError, ValueError, EOFError, KeyError, IndexError)
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild dicts, lists, bytes and numpy arrays, and nothing else.

    A pickle runs any callable it names when loaded, and scenario files may name data paths, so a
    plain ``pickle.load`` of a user-supplied file could execute arbitrary code (``os.system``).
    The CIFAR-10 batches need only three globals to rebuild their numpy arrays; every other global
    is refused with ``pickle.UnpicklingError``.
    """

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    def find_class(self, module: str, name: str):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a data file") from None


def _splits(split: Split) -> tuple[str, ...]:
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    return ("train", "test") if split == "all" else (split,)


def _require_files(folder: Path, names: tuple[str, ...], dataset: str) -> None:
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder}: {dataset} files not found ({', '.join(missing)}); expected {', '.join(names)}")


def _cifar_folder(path: Path) -> Path:
    nested = path / "cifar-10-batches-py"
    return nested if nested.is_dir() else path


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as stream:
            # The official batches were written by Python 2: "bytes" keeps their str keys as bytes.
            batch = RestrictedUnpickler(stream, encoding="bytes").load()
        data = np.asarray(batch.get(b"data", batch.get("data")), dtype=np.uint8)
        labels = np.asarray(batch.get(b"labels", batch.get("labels")), dtype=np.int64)
        images = data.reshape(len(data), 3, 32, 32)
    except _NOT_A_BATCH as err:
        raise UserError(f"{path}: not a CIFAR-10 python batch ({err})") from None
    if len(labels) != len(images):
        raise UserError(f"{path}: {len(images)} images but {len(labels)} labels")
    return images, labels


def load_cifar10(path: Path, split: Split = "all") -> Dataset:
    """CIFAR-10 from the official python batches: 3x32x32 images in [0, 1], 10 classes."""
    folder = _cifar_folder(Path(path))
    names = {"train": CIFAR10_TRAIN, "test": CIFAR10_TEST}
    wanted = tuple(name for part in _splits(split) for name in names[part])
    _require_files(folder, wanted, "CIFAR-10")
    batches = [_read_cifar_batch(folder / name) for name in wanted]
    x = np.concatenate([images for images, _ in batches]).astype(np.float32) / np.float32(255)
    y = np.concatenate([labels for _, labels in batches])
    return Dataset("cifar10", x, y, 10, (3, 32, 32))


def _idx_path(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise UserError(f"{folder}: Fashion-MNIST file {name} (or {name}.gz) not found; expected "
                    f"{', '.join(n for pair in FASHION_FILES.values() for n in pair)}, plain or .gz")


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (the MNIST family's format), gzipped or plain, detected by its bytes."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in IDX_DTYPES:
        raise UserError(f"{path}: not an IDX file (bad magic number)")
    dtype, ndim = np.dtype(IDX_DTYPES[raw[2]]), raw[3]
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    if len(raw) - offset != int(np.prod(shape)) * dtype.itemsize:
        raise UserError(f"{path}: IDX header says shape {shape} but the file holds {len(raw) - offset} data bytes")
    return np.frombuffer(raw, dtype, offset=offset).reshape(shape)


def load_fashion_mnist(path: Path, split: Split = "all") -> Dataset:
    """Fashion-MNIST from its IDX files: 1x28x28 images in [0, 1], 10 classes."""
    folder = Path(path)
    images, labels = [], []
    for part in _splits(split):
        image_name, label_name = FASHION_FILES[part]
        x, y = read_idx(_idx_path(folder, image_name)), read_idx(_idx_path(folder, label_name))
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise UserError(f"{folder}: {image_name} has shape {x.shape} but {label_name} has {y.shape}")
        images.append(x)
        labels.append(y)
    x = np.concatenate(images).astype(np.float32)[:, None] / np.float32(255)
    return Dataset("fashion_mnist", x, np.concatenate(labels).astype(np.int64), 10, (1,) + x.shape[2:])


def _read_leaf_shard(path: Path) -> dict:
    try:
        shard = json.loads(path.read_text())
        return {user: shard["user_data"][user] for user in shard["users"]}
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a LEAF JSON file with 'users' and 'user_data' ({err})") from None


def load_femnist_with_writers(path: Path) -> tuple[Dataset, list[np.ndarray]]:
    """FEMNIST from LEAF's JSON shards: 1x28x28 images in [0, 1], 62 classes, and the natural
    partition (one sorted int64 index array per writer, in file then ``users`` order)."""
    folder = Path(path)
    shards = sorted(folder.glob("*.json"))
    if not shards:
        raise UserError(f"{folder}: no FEMNIST files; expected LEAF JSON shards (*.json with users, user_data)")
    images, labels, writers, start = [], [], [], 0
    for shard in shards:
        for user, samples in _read_leaf_shard(shard).items():
            x = np.asarray(samples["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
            y = np.asarray(samples["y"], dtype=np.int64)
            if len(x) != len(y) or (len(y) and (y.min() < 0 or y.max() >= FEMNIST_CLASSES)):
                raise UserError(f"{shard}: user {user}: {len(x)} images, {len(y)} labels, labels must be 0..61")
            images.append(x)
            labels.append(y)
            writers.append(np.arange(start, start + len(y), dtype=np.int64))
            start += len(y)
    x = np.concatenate(images)
    if x.size and x.max() > 1.0:  # some conversions keep 0..255 pixels; LEAF's own are in [0, 1]
        x = x / np.float32(255)
    return Dataset("femnist", x, np.concatenate(labels), FEMNIST_CLASSES, (1, 28, 28)), writers


def load_femnist(path: Path) -> Dataset:
    """FEMNIST from LEAF's JSON shards, without the per-writer partition."""
    return load_femnist_with_writers(path)[0]


FILE_DATASETS: dict[str, Callable[[Path], Dataset]] = {
    "cifar10": load_cifar10,
    "fashion_mnist": load_fashion_mnist,
    "femnist": load_femnist,
}


def load_dataset_from(name: str, path: Path) -> Dataset:
    """Load a dataset of `FILE_DATASETS` from the local folder ``path``."""
    if name not in FILE_DATASETS:
        raise UserError(f"data.dataset: unknown file dataset '{name}'; valid: {', '.join(sorted(FILE_DATASETS))}")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise UserError(f"{folder}: no such data folder for dataset '{name}'")
    return FILE_DATASETS[name](folder)
