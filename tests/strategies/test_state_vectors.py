"""Tests for state dict <-> flat vector conversions (strategies.vectors)."""

import pytest
import torch

from testbed.strategies.vectors import flatten_state, stack_states, unflatten_state


def test_round_trip_keeps_shapes_dtypes_and_rounds_int_buffers():
    # Prepare
    bn = torch.nn.BatchNorm1d(3)
    bn.num_batches_tracked.fill_(4)
    state = bn.state_dict()
    # Execute
    vec = flatten_state(state)
    back = unflatten_state(vec + 0.4, state)  # 4.4 batches must round back to an integer
    # Assert
    assert vec.numel() == 3 * 4 + 1
    assert back["num_batches_tracked"].dtype == torch.long and int(back["num_batches_tracked"]) == 4
    assert torch.allclose(back["running_var"], state["running_var"] + 0.4)


def test_stack_uses_first_state_key_order():
    a = {"x": torch.tensor([1.0]), "y": torch.tensor([2.0, 3.0])}
    b = {"y": torch.tensor([5.0, 6.0]), "x": torch.tensor([4.0])}
    stacked = stack_states([a, b])
    assert stacked.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_mismatched_inputs_raise():
    with pytest.raises(ValueError, match="states"):
        stack_states([{"x": torch.zeros(1)}, {"z": torch.zeros(1)}])
    with pytest.raises(ValueError, match="vector"):
        unflatten_state(torch.zeros(3), {"x": torch.zeros(2)})
