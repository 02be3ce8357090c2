"""A client's state dict to and from Flower's `ArrayRecord` (`testbed.federated.arrays`): the same
records and tensors as Flower's own conversions, byte for byte, for every dtype and shape a model
holds, and Flower's path where the fast one does not apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from testbed.federated.arrays import npy_header, record_of, state_of

STATE = {
    "conv.weight": torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(0)),
    "fc.bias": torch.randn(10, dtype=torch.float64),
    "bn.num_batches_tracked": torch.tensor(7),  # a 0-d int64 buffer
    "mask": torch.tensor([True, False, True]),
    "empty": torch.zeros(0, 5),
    "half": torch.ones(2, 2, dtype=torch.float16),
    "transposed": torch.arange(6.0).reshape(2, 3).t(),  # not C order: Flower's own path
}


def _fields(record: ArrayRecord) -> dict[str, tuple]:
    return {key: (a.dtype, tuple(a.shape), a.stype, a.data) for key, a in record.items()}


def test_a_record_is_the_one_flower_makes_byte_for_byte():
    assert list(record_of(STATE)) == list(STATE)
    assert _fields(record_of(STATE)) == _fields(ArrayRecord(STATE))
    assert _fields(record_of(STATE)) == _fields(ArrayRecord.from_torch_state_dict(STATE))


def test_a_state_is_the_one_flower_reads_and_its_tensors_are_writable():
    record = ArrayRecord(STATE)
    ours, flowers = state_of(record), record.to_torch_state_dict()
    assert list(ours) == list(flowers)
    for key, tensor in ours.items():
        assert tensor.dtype == flowers[key].dtype and tensor.shape == flowers[key].shape
        assert torch.equal(tensor, flowers[key]) and torch.equal(tensor, STATE[key])
        tensor.add_(1) if tensor.dtype != torch.bool else tensor.logical_not_()  # no warning, no shared bytes
    assert _fields(record) == _fields(ArrayRecord(STATE))  # the message's bytes untouched


def test_a_header_written_otherwise_is_read_by_flowers_path():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    fortran = Array.from_numpy_ndarray(np.asfortranarray(values))  # fortran_order: True, same dtype and shape
    assert fortran.data[:len(npy_header("float32", (2, 3)))] != npy_header("float32", (2, 3))
    assert np.array_equal(state_of(ArrayRecord({"w": fortran}))["w"].numpy(), values)


def test_another_serialization_type_is_refused_as_flower_refuses_it():
    other = Array(dtype="float32", shape=(2,), stype="other", data=b"\0" * 8)
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        state_of(ArrayRecord({"w": other}))
