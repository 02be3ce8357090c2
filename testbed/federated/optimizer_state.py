"""The server optimizer's state of a strategy, in checkpoints, so that a resumed run ends as an uninterrupted one.

Flower's FedOpt family (FedAdagrad, FedAdam, FedYogi) keeps its moments ``m_t`` and ``v_t``, and
FedAvgM its ``momentum_vector``, as attributes of the strategy object, from round to round. A run
resumed from a checkpoint that held only the global model would restart them at zero and end with
other numbers. These functions read them from the innermost strategy (through the testbed's and
Flower's wrappers, which hold theirs as ``dp`` or ``strategy``) as tensors, which a checkpoint
loaded with ``weights_only=True`` accepts, and put them back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

STATE_ATTRIBUTES = ("m_t", "v_t", "momentum_vector")
CHECKPOINT_KEY = "server_optimizer"


def _innermost(strategy: Any) -> Any:
    while (inner := getattr(strategy, "dp", None) or getattr(strategy, "strategy", None)) is not None:
        strategy = inner
    return strategy


def optimizer_checkpoint(strategy: Any) -> dict[str, Any]:
    """``{CHECKPOINT_KEY: state}`` for a strategy with server-optimizer state, else ``{}``."""
    inner = _innermost(strategy)
    state: dict[str, Any] = {}
    for name in STATE_ATTRIBUTES:
        value = getattr(inner, name, None)
        if isinstance(value, dict):
            state[name] = {key: torch.from_numpy(np.array(array)) for key, array in value.items()}
        elif isinstance(value, list):
            state[name] = [torch.from_numpy(np.array(array)) for array in value]
    return {CHECKPOINT_KEY: state} if state else {}


def restore_optimizer(strategy: Any, checkpoint: dict[str, Any] | None) -> None:
    """Put a checkpoint's server-optimizer state (`optimizer_checkpoint`) back into the strategy."""
    if checkpoint is None or CHECKPOINT_KEY not in checkpoint:
        return
    inner = _innermost(strategy)
    for name, value in checkpoint[CHECKPOINT_KEY].items():
        if isinstance(value, dict):
            setattr(inner, name, {key: tensor.numpy() for key, tensor in value.items()})
        else:
            setattr(inner, name, [tensor.numpy() for tensor in value])
