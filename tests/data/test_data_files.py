"""Loaders of CIFAR-10, Fashion-MNIST and FEMNIST from tiny synthetic files in the real formats."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import shlex
import struct
from pathlib import Path

import numpy as np
import pytest

from testbed.data.files import (
    RestrictedUnpickler,
    load_cifar10,
    load_dataset_from,
    load_fashion_mnist,
    load_femnist_with_writers,
)
from testbed.errors import UserError

CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def write_cifar(folder: Path, per_batch: int = 6) -> dict[str, tuple[np.ndarray, list[int]]]:
    """The official layout: a dict with b"data" uint8 [n, 3072] (R, G, B planes) and b"labels"."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    written = {}
    for name in CIFAR_BATCHES:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch).tolist()
        batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
                 b"filenames": [f"{name}_{i}.png".encode() for i in range(per_batch)]}
        (folder / name).write_bytes(pickle.dumps(batch))
        written[name] = (data, labels)
    return written


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file of unsigned bytes: magic 0x0000080N (N = number of dimensions), then the sizes."""
    return struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_fashion(folder: Path) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, size=5, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, size=3, dtype=np.uint8),
    }
    for name, array in arrays.items():
        if name.startswith("train"):  # training files gzipped, test files plain, as both occur
            (folder / f"{name}.gz").write_bytes(gzip.compress(idx_bytes(array)))
        else:
            (folder / name).write_bytes(idx_bytes(array))
    return arrays


def leaf_user(rng: np.random.Generator, count: int) -> dict:
    return {"x": rng.random((count, 784)).round(4).tolist(), "y": rng.integers(0, 62, size=count).tolist()}


class Evil:
    """Unpickling this would run a shell command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def test_cifar10_batches_load_as_float_images_in_channel_first_layout(tmp_path):
    written = write_cifar(tmp_path / "cifar-10-batches-py")

    data = load_cifar10(tmp_path)  # the parent folder works as well as the batches folder
    train = load_cifar10(tmp_path / "cifar-10-batches-py", split="train")
    test = load_cifar10(tmp_path / "cifar-10-batches-py", split="test")

    assert data.x.shape == (36, 3, 32, 32) and data.x.dtype == np.float32 and data.y.dtype == np.int64
    assert 0.0 <= data.x.min() and data.x.max() <= 1.0 and data.image_shape == (3, 32, 32)
    assert len(train.y) == 30 and len(test.y) == 6 and data.num_classes == 10
    first, labels = written["data_batch_1"]
    assert np.allclose(data.x[0] * 255, first[0].reshape(3, 32, 32))  # red plane first
    assert data.y[:6].tolist() == labels and test.y.tolist() == written["test_batch"][1]


def py2_batch_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """A batch as Python 2's cPickle wrote the official files: protocol 2, str (not bytes) opcodes,
    and numpy 1's module name ``numpy.core.multiarray``. Written opcode by opcode."""
    def text(value: bytes) -> bytes:  # SHORT_BINSTRING, a Python 2 str
        return b"U" + bytes([len(value)]) + value

    raw = data.tobytes()
    dtype = (b"cnumpy\ndtype\n" + text(b"u1") + b"K\x00K\x01\x87R"
             + b"(K\x03" + text(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb")
    array = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + b"K\x00\x85" + text(b"b") + b"\x87R"
             + b"(K\x01" + b"K" + bytes([len(data)]) + b"M" + struct.pack("<H", data.shape[1]) + b"\x86" + dtype
             + b"\x89" + b"T" + struct.pack("<I", len(raw)) + raw + b"tb")
    label_list = b"](" + b"".join(b"K" + bytes([label]) for label in labels) + b"e"
    return b"\x80\x02}(" + text(b"data") + array + text(b"labels") + label_list + b"u."


def test_cifar10_batches_written_by_python2_load(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    data = np.random.default_rng(3).integers(0, 256, size=(4, 3072), dtype=np.uint8)
    (folder / "test_batch").write_bytes(py2_batch_pickle(data, [9, 0, 3, 3]))

    test = load_cifar10(folder, split="test")

    assert np.allclose(test.x.reshape(4, -1) * 255, data) and test.y.tolist() == [9, 0, 3, 3]


def test_restricted_unpickler_refuses_code_execution(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({b"data": Evil(marker), b"labels": [0]})
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    (folder / "test_batch").write_bytes(payload)

    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system|nt.system"):
        RestrictedUnpickler(io.BytesIO(payload)).load()
    with pytest.raises(UserError, match="not a CIFAR-10 python batch"):
        load_cifar10(folder, split="test")

    assert not marker.exists()
    assert pickle.loads(payload) is not None and marker.exists()  # the payload is real: plain pickle runs it


def test_missing_cifar_files_name_the_folder_and_expected_files(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar(folder)
    (folder / "data_batch_3").unlink()

    with pytest.raises(UserError) as caught:
        load_cifar10(folder)

    message = str(caught.value)
    assert str(folder) in message and "data_batch_3" in message and "test_batch" in message


def test_fashion_mnist_idx_files_load_plain_and_gzipped(tmp_path):
    arrays = write_fashion(tmp_path / "fashion")

    data = load_fashion_mnist(tmp_path / "fashion")

    assert data.x.shape == (8, 1, 28, 28) and data.x.dtype == np.float32 and data.image_shape == (1, 28, 28)
    assert 0.0 <= data.x.min() and data.x.max() <= 1.0
    assert np.allclose(data.x[5, 0] * 255, arrays["t10k-images-idx3-ubyte"][0])
    expected = np.concatenate([arrays["train-labels-idx1-ubyte"], arrays["t10k-labels-idx1-ubyte"]])
    assert data.y.dtype == np.int64 and data.y.tolist() == expected.tolist()


def test_fashion_mnist_bad_or_missing_files_are_user_errors(tmp_path):
    folder = tmp_path / "fashion"
    write_fashion(folder)
    (folder / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", 99) + b"\x01")

    with pytest.raises(UserError, match="IDX header says shape"):
        load_fashion_mnist(folder)
    (folder / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(UserError, match=r"t10k-labels-idx1-ubyte \(or t10k-labels-idx1-ubyte\.gz\) not found"):
        load_fashion_mnist(folder)


def test_femnist_leaf_json_gives_images_and_the_per_writer_partition(tmp_path):
    rng = np.random.default_rng(2)
    users = {"f0001_00": leaf_user(rng, 3), "f0002_11": leaf_user(rng, 2)}
    shard = {"users": list(users), "num_samples": [3, 2], "user_data": users}
    (tmp_path / "all_data_0.json").write_text(json.dumps(shard))

    data, writers = load_femnist_with_writers(tmp_path)

    assert data.x.shape == (5, 1, 28, 28) and data.x.dtype == np.float32 and data.num_classes == 62
    assert 0.0 <= data.x.min() and data.x.max() <= 1.0
    assert [w.tolist() for w in writers] == [[0, 1, 2], [3, 4]]
    second_writer = np.asarray(users["f0002_11"]["x"], dtype=np.float32).reshape(2, 1, 28, 28)
    assert np.array_equal(data.x[writers[1]], second_writer)
    assert data.y.tolist() == users["f0001_00"]["y"] + users["f0002_11"]["y"]


def test_load_dataset_from_uses_the_registry_and_reports_bad_paths(tmp_path):
    write_fashion(tmp_path / "fashion")

    data = load_dataset_from("fashion_mnist", tmp_path / "fashion")

    assert data.name == "fashion_mnist" and len(data.y) == 8
    with pytest.raises(UserError, match="unknown file dataset 'mnist'"):
        load_dataset_from("mnist", tmp_path)
    with pytest.raises(UserError, match="no such data folder"):
        load_dataset_from("cifar10", tmp_path / "nowhere")
    with pytest.raises(UserError, match="no FEMNIST files"):
        load_dataset_from("femnist", tmp_path)
