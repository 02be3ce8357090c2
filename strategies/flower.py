"""Flower 1.42 Message-API strategies: ``SDEA``, ``DnC``, ``RFA`` and ``FLTrust``.

Drop-in replacements for ``flwr.serverapp.strategy.FedAvg`` in any ServerApp::

    strategy = SDEA(model_fn=Net, public_x=x_pub, augment=aug, min_available_nodes=10)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=5)
    strategy.history  # per round: client ids, weights, flagged clients

Clients should reply with an ArrayRecord of their full ``state_dict`` and a
MetricRecord holding ``num-examples`` and, for reproducible ordering,
``partition-id`` (see :mod:`strategies.base`). The rules themselves live in
:mod:`strategies.robust` and :mod:`strategies.sdea`.

Under ``flwr run`` with a local federation, Flower itself starts a managed ``flower-superlink
--simulation`` detached from the command and keeps it, with its SuperExec and an idle
``flwr-simulation``, for the next ``flwr run`` (``flwr/cli/local_superlink.py``): those processes are
Flower's by design; the run's own Ray workers end with the run. ``pkill -f flower-superlink`` stops
all three. ``scenarios/flower-app`` is such an app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .base import RobustFedAvg
from .robust import Aggregate, dnc, fltrust, geometric_median
from .sdea import BN_MODES, RULES, Augment, OptimSettings, cooperative_weights, learn_weights
from .vectors import flatten_state, unflatten_state

RuleResult = tuple[Aggregate, dict[str, Any]]
StateFn = Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]]


def _round_generator(seed: int, server_round: int) -> torch.Generator:
    """A generator that differs per round but is the same across runs."""
    return torch.Generator().manual_seed(seed * 1_000_003 + server_round)


class DnC(RobustFedAvg):
    """Divide-and-Conquer (Shejwalkar & Houmansadr 2021) on client updates; see :func:`strategies.robust.dnc`.

    ``num_malicious_nodes`` is the assumed ``f``; the kept updates are averaged
    uniformly, as in the paper.
    """

    def __init__(
        self,
        *,
        num_malicious_nodes: int,
        filter_frac: float = 1.0,
        num_iters: int = 1,
        sub_dim: int = 10000,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.dnc_params: dict[str, Any] = {
            "num_malicious": num_malicious_nodes,
            "filter_frac": filter_frac,
            "num_iters": num_iters,
            "sub_dim": sub_dim,
        }
        self.seed = seed

    def _rule(self, server_round, updates, num_examples, global_vec, template) -> RuleResult:
        gen = _round_generator(self.seed, server_round)
        return dnc(updates, generator=gen, **self.dnc_params), {}


class RFA(RobustFedAvg):
    """Robust Federated Aggregation (Pillutla et al.): weighted geometric median of updates.

    Client weights are the ``num-examples`` metric (the paper's ``alpha_i``)
    unless ``weighted=False``. It down-weights outliers but flags nobody.
    """

    flags_clients = False

    def __init__(
        self,
        *,
        nu: float = 1e-6,
        max_iter: int = 100,
        ftol: float = 1e-6,
        weighted: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.rfa_params: dict[str, Any] = {"nu": nu, "max_iter": max_iter, "ftol": ftol}
        self.weighted = weighted

    def _rule(self, server_round, updates, num_examples, global_vec, template) -> RuleResult:
        weights = num_examples if self.weighted else None
        return geometric_median(updates, weights, **self.rfa_params), {}


class FLTrust(RobustFedAvg):
    """FLTrust (Cao et al. 2021): trust scores from the server's own update on a root dataset.

    ``server_update_fn(global_state, server_round)`` must train a copy of the
    global model on the server's root data (same local procedure as clients)
    and return its ``state_dict``; the server update is its difference to the
    global model.
    """

    def __init__(self, *, server_update_fn: StateFn, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not callable(server_update_fn):
            raise ValueError("server_update_fn: must be callable (global_state, round) -> state_dict")
        self.server_update_fn = server_update_fn

    def _rule(self, server_round, updates, num_examples, global_vec, template) -> RuleResult:
        trained = self.server_update_fn({k: v.clone() for k, v in template.items()}, server_round)
        server_update = flatten_state({k: trained[k] for k in template}) - global_vec
        result = fltrust(updates, server_update=server_update)
        return result, {"trust": [float(w) for w in result.weights]}


class SDEA(RobustFedAvg):
    """SDEA (Huang et al., ICML 2024): entropy-driven learned weights + FINCH filtering.

    ``model_fn`` builds the architecture for ``torch.func.functional_call``;
    ``public_x`` is the unlabelled public set and ``augment(x, generator)`` one
    augmented view. ``rule="code"`` (default) follows the authors' code: the
    flagged clients keep their learned weight and the rest share what is
    left equally; ``rule="two_group"`` zeroes the flagged group (see
    :mod:`strategies.sdea`). ``bn_mode`` runs the virtual model's batch norm
    in training (default, as the authors' code) or eval mode. The learned
    softmax weights are stored in ``history[i]["learned"]``.
    """

    def __init__(
        self,
        *,
        model_fn: Callable[[], torch.nn.Module],
        public_x: torch.Tensor,
        augment: Augment | None = None,
        epochs: int = 20,
        rule: str = "code",
        bn_mode: str = "train",
        seed: int = 0,
        batch_size: int = 64,
        lr: float = 0.005,
        weight_decay: float = 1e-5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if rule not in RULES:
            raise ValueError(f"rule: unknown {rule!r}; valid: {list(RULES)}")
        if bn_mode not in BN_MODES:
            raise ValueError(f"bn_mode: unknown {bn_mode!r}; valid: {list(BN_MODES)}")
        self.model_fn, self.public_x, self.augment = model_fn, public_x, augment
        self.epochs, self.rule, self.bn_mode, self.seed = epochs, rule, bn_mode, seed
        self.optim: OptimSettings = {"batch_size": batch_size, "lr": lr, "weight_decay": weight_decay}

    def _rule(self, server_round, updates, num_examples, global_vec, template) -> RuleResult:
        # Rebuild client states from (possibly attacked) updates so the virtual
        # model sees exactly what is aggregated.
        states = [unflatten_state(global_vec + row, template) for row in updates]
        gen = _round_generator(self.seed, server_round)
        learned = learn_weights(
            self.model_fn, states, self.public_x, self.augment, self.epochs, gen, bn_mode=self.bn_mode, **self.optim
        )
        weights, flagged = cooperative_weights(learned, self.rule)
        result = Aggregate(weights.to(updates.dtype) @ updates, weights, flagged)
        return result, {"learned": [float(w) for w in learned]}
