"""Conversions between model state dicts and flat update vectors.

The aggregation rules in :mod:`strategies.robust` and the attacks in
:mod:`strategies.attacks` work on one matrix of shape ``[n_clients, dim]``.
These helpers turn a list of ``state_dict``s into that matrix and back, in a
fixed key order (the order of the first state dict), so that the same inputs
always give the same vector layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

StateDict = Mapping[str, torch.Tensor]


def flatten_state(state: StateDict, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Concatenate every tensor of ``state`` (parameters and buffers) into one vector."""
    if not state:
        raise ValueError("state: must contain at least one tensor")
    return torch.cat([torch.as_tensor(t).detach().reshape(-1).to(dtype) for t in state.values()])


def stack_states(states: Sequence[StateDict], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Stack the flattened ``states`` into a ``[n_clients, dim]`` matrix.

    Every state must have the keys and shapes of the first one; the key order
    of the first one is used for all, so dict ordering never changes the layout.
    """
    if not states:
        raise ValueError("states: need at least one state dict")
    keys = list(states[0].keys())
    rows = []
    for i, state in enumerate(states):
        if set(state.keys()) != set(keys):
            raise ValueError(f"states: state {i} has different keys from state 0")
        rows.append(flatten_state({k: state[k] for k in keys}, dtype))
    return torch.stack(rows)


def unflatten_state(vector: torch.Tensor, template: StateDict) -> dict[str, torch.Tensor]:
    """Split ``vector`` back into tensors shaped and typed like ``template``.

    Integer and boolean buffers (e.g. BatchNorm's ``num_batches_tracked``) are
    rounded before the cast, because an average of counters is not an integer.
    """
    total = sum(torch.as_tensor(t).numel() for t in template.values())
    if vector.numel() != total:
        raise ValueError(f"vector: has {vector.numel()} entries, template needs {total}")
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for key, ref in template.items():
        ref = torch.as_tensor(ref)
        chunk = vector[offset : offset + ref.numel()].reshape(ref.shape)
        offset += ref.numel()
        if not (ref.is_floating_point() or ref.is_complex()):
            chunk = chunk.round()
        out[key] = chunk.to(ref.dtype).clone()
    return out
