"""`BiSAM`: a sharpness-aware wrapper around any torch optimizer (BiSAM, SAM, or plain steps).

One step (Xie et al. 2024, Algorithm 1, the same cost as SAM):

1. ``g1 = grad ascent_loss(w)`` on the batch;
2. ``eps = rho * g1 / ||g1||`` (the first-order solution of the inner problem ``max_{||eps||<=rho}``);
3. ``g2 = grad upper_loss(w + eps)``;
4. restore ``w`` and let the base optimizer step with ``g2``.

BiSAM's ``ascent_loss`` is the lower bound of the 0-1 loss (`LowerBoundSurrogate`), SAM's is the
cross-entropy itself (Foret et al. 2021), and ``ascent_loss=None`` skips the perturbation (SGD or
whatever the base optimizer is). Usage, for any model and by federated clients alike::

    optimizer = BiSAM(torch.optim.SGD(model.parameters(), lr=0.05), rho=0.05)
    loss = optimizer.step(lambda loss_fn: loss_fn(model(x), y))

The closure receives the loss function of the current pass and returns its value; the wrapper
zeroes gradients and back-propagates itself. Passing ``model`` freezes batch-norm running
statistics during the perturbed pass, so statistics of ``w + eps`` never reach test time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from testbed.workloads.bisam.surrogate import LowerBoundSurrogate

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Closure = Callable[[LossFn], torch.Tensor]


@contextmanager
def frozen_batchnorm_statistics(model: nn.Module | None) -> Iterator[None]:
    """Keep batch-norm running means/variances unchanged (momentum 0) inside the block."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)] if model else []
    saved = [m.momentum for m in norms]
    for module in norms:
        module.momentum = 0.0
    try:
        yield
    finally:
        for module, momentum in zip(norms, saved):
            module.momentum = momentum


class BiSAM(torch.optim.Optimizer):
    """Wraps a base optimizer: perturb along ``grad ascent_loss``, descend ``upper_loss`` there.

    ``rho`` is the radius of the perturbation ball; ``ascent_loss`` defaults to BiSAM's
    ``-log`` lower bound with ``mu = 1``; ``upper_loss`` defaults to cross-entropy. The wrapper
    shares the base optimizer's parameter groups, so learning-rate schedulers work on either.
    """

    def __init__(self, base: torch.optim.Optimizer, rho: float = 0.05,
                 ascent_loss: LossFn | None = LowerBoundSurrogate(), upper_loss: LossFn = F.cross_entropy,
                 model: nn.Module | None = None):
        if rho < 0:
            raise ValueError(f"rho must be non-negative, got {rho}")
        super().__init__(base.param_groups, base.defaults)
        self.base, self.rho, self.model = base, rho, model
        self.param_groups = base.param_groups  # one shared list: a scheduler may drive either object
        self.ascent_loss, self.upper_loss = ascent_loss, upper_loss
        # True while the closure computes the perturbation's objective: a closure adding terms
        # that belong to the descended loss only (e.g. FedProx's) checks it.
        self.in_ascent = False
        # The ascent objective's value at w in the last step (a diagnostic; no role in the update).
        self.last_ascent_value: float = float("nan")

    def _parameters(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def _backward(self, closure: Closure, loss_fn: LossFn) -> torch.Tensor:
        self.base.zero_grad(set_to_none=True)
        with torch.enable_grad():
            loss = closure(loss_fn)
            loss.backward()
        return loss.detach()

    @torch.no_grad()
    def _perturb(self) -> list[torch.Tensor]:
        """Move every parameter by ``eps = rho g / ||g||``; return the offsets to undo later."""
        params = self._parameters()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        # A zero gradient (every sample already at the surrogate's flat part) means no ascent direction.
        scale = self.rho / norm if norm > 0 else torch.zeros(())
        offsets = [g * scale for g in grads]
        for param, offset in zip(params, offsets):
            param.add_(offset)
        return offsets

    @torch.no_grad()
    def _restore(self, offsets: list[torch.Tensor]) -> None:
        for param, offset in zip(self._parameters(), offsets):
            param.sub_(offset)

    def step(self, closure: Closure) -> torch.Tensor:  # type: ignore[override]
        """One sharpness-aware step; returns ``upper_loss`` at the (perturbed) weights it descended."""
        if self.ascent_loss is None or self.rho == 0:
            loss = self._backward(closure, self.upper_loss)
            self.base.step()
            return loss
        self.in_ascent = True
        try:
            self.last_ascent_value = float(self._backward(closure, self.ascent_loss))
        finally:
            self.in_ascent = False
        offsets = self._perturb()
        with frozen_batchnorm_statistics(self.model):
            loss = self._backward(closure, self.upper_loss)
        self._restore(offsets)
        self.base.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every wrapped parameter."""
        self.base.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The base optimizer's state (momentum buffers, groups); the wrapper itself keeps none."""
        return self.base.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the base optimizer's state."""
        self.base.load_state_dict(state_dict)
        self.param_groups = self.base.param_groups  # loading replaces the base's group list
