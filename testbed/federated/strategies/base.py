"""What a server strategy declares, once, on its own class: the plugin API of ``testbed.strategies``.

A strategy is a subclass of `StrategyPlugin` (torchtitan's ``Configurable``: a nested ``Config`` and a
``build``), one per module as in ``flwr.serverapp.strategy``. Everything else reads the class: the
registry (`testbed.federated.strategies.registered_strategies`), validation (``Config``,
``min_clients``, ``check``), the round loop (``streamed``, ``client_weights``), ``testbed list``
(``summary``) and the robustness report (``cost``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from testbed.config import StrictModel

if TYPE_CHECKING:  # a declaration imports no torch nor Flower: its `build` does (`testbed validate` stays light)
    from flwr.app import ArrayRecord, Message
    from flwr.serverapp.strategy import Strategy

    from testbed.federated.setup import FederationSetup

Weights = tuple[list[float] | None, list[bool] | None]  # per-client weights and flags, in the round's id order

# How one round's aggregation time grows with the number n of uploads (d parameters each): a strategy
# declares one, and tests/strategies/test_strategy_contract.py holds it to it.
CostClass = Literal["linear", "quadratic"]

# What one round's aggregation costs the server, in words, for n uploads of d parameters each.
STREAMED = ("O(n d) time; O(d) memory plus a fixed budget, uploads staged (testbed.federated.staging) unless a "
            "model attack or DP clipping needs every upload, then O(n d)")
HELD = "O(n d) time, O(n d) memory (every upload held)"
PAIRWISE = "O(n^2 d) time (Gram matrix of all uploads), O(n^2 + n d) memory"


class NoParams(StrictModel):
    """A strategy without parameters of its own."""


class ByzantineCount(StrictModel):
    """Rules that must be told how many clients may be Byzantine (default: the attack's count)."""

    num_malicious: int | None = Field(None, ge=0)


class StrategyPlugin(ABC):
    """One server strategy: its name, typed config, declared capabilities and how to build it.

    Subclass it, set the class attributes and write `build`; a module of this package (a built-in)
    or a ``testbed.strategies`` entry point naming the class (a plugin) registers it. The class is
    never instantiated: it is the declaration.

    - ``name``: what ``federated.strategy.name`` says; ``summary``: one line for ``testbed list strategies``.
    - ``Config``: the typed keys of ``federated.strategy`` besides ``name`` (`NoParams` for none). A
      ``num_malicious`` field, where present, is the Byzantine count the rule is told (default: the
      attack's true count, `declared_malicious`).
    - ``cost``: the aggregation cost for n uploads of d parameters, in words (the report prints it);
      ``cost_class``: how its time grows with n, "linear" or "quadratic" (pairwise distances, an SVD).
    - ``streamed``: True when the aggregate is FedAvg's weighted mean of the uploads (then a server
      optimizer, for some), so a round may stage the uploads instead of holding every reply.
    - `min_clients`: the fewest clients per round it needs against ``f`` Byzantine ones.
    - `server_samples`: how many training samples the server holds back for itself (FLTrust's root
      set), carved out before the clients' partition; 0 for most.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Config: ClassVar[type[StrictModel]] = NoParams
    cost: ClassVar[str] = "not stated"
    cost_class: ClassVar[CostClass] = "linear"
    streamed: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def build(cls, config: Any, setup: FederationSetup, f: int) -> Strategy:
        """The Flower strategy of one run, given the validated ``config``, the `FederationSetup` and
        the Byzantine count ``f``. Pass it ``**flower_round_settings(setup)`` so it trains exactly the
        round's clients (`round_clients`) and evaluates on the server only."""

    @classmethod
    def min_clients(cls, f: int) -> int:
        """The fewest clients per round the rule needs to tolerate ``f`` Byzantine ones (validation
        refuses a scenario with fewer)."""
        return 1

    @classmethod
    def server_samples(cls, config: Any) -> int:
        """Training samples the server takes for itself before the data is partitioned (FLTrust's
        root set): the clients then hold different data than under another rule."""
        return 0

    @classmethod
    def check(cls, config: Any, scenario: Any) -> None:
        """Refuse settings that depend on the rest of the scenario: raise ValueError("field: why"),
        the field relative to ``federated.strategy``. Most strategies need nothing more than ``Config``."""
        return None

    @classmethod
    def client_weights(cls, strategy: Strategy, ids: list[int], replies: list[Message] | None,
                       new_arrays: ArrayRecord | None, examples: list[float]) -> Weights:
        """The weight (and flag) the rule gave each client of the round, in ``ids`` order, where it
        defines them; ``replies`` in that order (None when the round staged its uploads). A rule
        that records a per-round ``history`` (`testbed.strategies.RobustFedAvg`) reports its last."""
        history = getattr(strategy, "history", None)
        if not history:
            return None, None
        last = history[-1]
        by_id = dict(zip(last["client_ids"], zip(last["weights"], last["flagged"])))
        flagged = [by_id[i][1] for i in ids] if getattr(strategy, "flags_clients", True) else None
        return [by_id[i][0] for i in ids], flagged


def round_clients(setup: FederationSetup) -> int:
    """The clients every round trains (all, or the sample's size)."""
    from testbed.federated.sampling import clients_per_round  # Flower's grid lives there

    assert setup.scenario.federated is not None  # a federated scenario
    return clients_per_round(setup.scenario.federated.sampling, setup.num_clients)


def flower_round_settings(setup: FederationSetup) -> dict[str, Any]:
    """The keyword arguments of Flower's ``FedAvg`` (and its subclasses) that make a strategy train
    exactly the round's clients and evaluate on the server only: every strategy passes them."""
    k = round_clients(setup)
    return {"fraction_train": 1.0, "fraction_evaluate": 0.0, "min_train_nodes": k, "min_available_nodes": k}


def example_weights(replies: list[Message] | None, examples: list[float]) -> Weights:
    """FedAvg's weights: each client's share of the round's examples."""
    if replies is not None:
        examples = [float(r.content["metrics"]["num-examples"]) for r in replies]  # type: ignore[arg-type]  # flwr
    total = sum(examples)
    return [e / total for e in examples], None


def selected_one_weights(replies: list[Message] | None, new_arrays: ArrayRecord | None) -> Weights:
    """A rule that picks one client's model (Krum): weight 1 on it, shared among every client that
    uploaded the very same model (colluding attackers, LIE and Min-Max, upload identical ones, so the
    weights still sum to 1); the others are flagged."""
    import torch

    from testbed.strategies.vectors import flatten_state

    if new_arrays is None or replies is None:
        return None, None
    chosen = flatten_state(new_arrays.to_torch_state_dict())
    # flwr types a RecordDict's items as any record
    matches = [torch.equal(flatten_state(r.content["arrays"].to_torch_state_dict()), chosen)  # type: ignore[union-attr]
               for r in replies]
    weights = [float(m) / max(sum(matches), 1) for m in matches]
    return weights, [not m for m in matches]
