"""Lower-bound surrogates of the 0-1 loss: the objective of BiSAM's perturbation (maximising) player.

Xie et al., "Improving SAM Requires Rethinking its Optimization Formulation" (ICML 2024), Sec. 3.
With the logit margins ``F_j = f(x)_j - f(x)_y`` (so ``F_y = 0``) the 0-1 loss of a sample is
``1[max_{j != y} F_j >= 0]``. For any ``phi`` lying below the step function (``phi(t) <= 1[t >= 0]``,
``phi(0) = 0``), ``max_j phi(F_j)`` is a lower bound of it; the paper smooths the max with a
log-sum-exp of temperature ``mu``::

    Q_{phi,mu}(w) = (1/n) sum_i (1/mu) log sum_j exp(mu * phi(F_j(x_i, y_i)))

and proposes two members of the family: ``phi(t) = tanh(alpha t)`` and the "-log" function
``phi(t) = 1 - log(1 + exp(gamma - t))`` with ``gamma = log(e - 1)`` (so ``phi(0) = 0``, ``phi -> 1``).

The log-sum-exp overshoots the max by at most ``log(K)/mu`` (K classes), so the value returned by
`lower_bound_surrogate` is ``Q_{phi,mu} - log(K)/mu``: a strict lower bound of the 0-1 loss whose
gradient, and therefore BiSAM's perturbation, is exactly that of the paper's ``Q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from testbed.workloads.bisam.config import SurrogateName

# gamma = log(e - 1) makes the -log function pass through the origin: 1 - log(1 + e - 1) = 0.
NEG_LOG_GAMMA = math.log(math.e - 1.0)


def logit_margins(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``F_j = f_j - f_y`` for every class j; the target column is exactly zero."""
    return logits - logits.gather(1, targets[:, None])


def phi_tanh(margins: torch.Tensor, alpha: float) -> torch.Tensor:
    """``tanh(alpha t)``: negative below zero, below one above it, hence under the step function."""
    return torch.tanh(alpha * margins)


def phi_neg_log(margins: torch.Tensor) -> torch.Tensor:
    """``1 - log(1 + exp(gamma - t))``: increasing, zero at the origin, tends to one (paper's "-log")."""
    return 1.0 - F.softplus(NEG_LOG_GAMMA - margins)


def zero_one_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample 0-1 loss ``1[argmax_j f_j != y]`` as floats."""
    return (logits.argmax(dim=1) != targets).to(logits.dtype)


@dataclass(frozen=True)
class LowerBoundSurrogate:
    """The perturbation objective ``Q_{phi,mu} - log(K)/mu`` (mean over the batch), a callable loss.

    ``name`` picks ``phi`` ("neg_log" or "tanh"), ``mu`` the log-sum-exp temperature and ``alpha``
    the slope of tanh. Called as ``surrogate(logits, targets)`` like a torch loss function.
    """

    name: SurrogateName = "neg_log"
    mu: float = 1.0
    alpha: float = 0.1

    def phi(self, margins: torch.Tensor) -> torch.Tensor:
        """The chosen lower bound of the step function, applied elementwise."""
        return phi_neg_log(margins) if self.name == "neg_log" else phi_tanh(margins, self.alpha)

    def per_sample(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``(1/mu) (log sum_j exp(mu phi(F_j)) - log K)`` for each sample: at most its 0-1 loss."""
        smoothed = torch.logsumexp(self.mu * self.phi(logit_margins(logits, targets)), dim=1)
        return (smoothed - math.log(logits.shape[1])) / self.mu

    def hard_max(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """``max_j phi(F_j)`` per sample: the unsmoothed lower bound, the limit as ``mu -> inf``."""
        return self.phi(logit_margins(logits, targets)).max(dim=1).values

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.per_sample(logits, targets).mean()
