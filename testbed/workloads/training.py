"""The one optimisation step every workload takes: zero the gradients, backpropagate, clip, step.

Workloads call `optimizer_step` instead of writing the four lines again, so a change to how a step
is taken (gradient clipping, a check that the loss is finite) is made once; `model_device` says
where a model's batches go (the run's device, `testbed.device`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def optimizer_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, *, clip_norm: float | None = None,
                   parameters: Iterable[torch.Tensor] | None = None) -> float:
    """One step of ``optimizer`` on ``loss``; returns the loss as a float.

    ``clip_norm`` clips the global gradient norm of ``parameters`` (default: every parameter the
    optimizer holds) before the step.
    """
    optimizer.zero_grad()
    loss.backward()
    if clip_norm is not None:
        held = parameters if parameters is not None else [p for g in optimizer.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(held, clip_norm)
    optimizer.step()
    return float(loss.detach())


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters, where its batches must go (the CPU for a model without any)."""
    return next(model.parameters(), torch.empty(0)).device
