"""Shared machinery of the Flower (1.42 Message API) robust strategies.

:class:`RobustFedAvg` subclasses Flower's ``FedAvg`` and overrides
``aggregate_train`` to

1. order the replies deterministically: by the ``partition-id`` entry of each
   reply's MetricRecord when clients send one (Flower node ids are random per
   run, so ordering by them is *not* reproducible across runs), else by
   ``msg.metadata.src_node_id``;
2. turn the reply ArrayRecords into a ``[n, dim]`` matrix of updates
   ``theta_k - theta_global`` (``theta_global`` is the ArrayRecord this
   strategy sent in ``configure_train`` of the same round);
3. optionally replace the updates of chosen clients by a model attack
   (:class:`ServerSideAttack`: the way to simulate omniscient attacks, which
   need every benign update of the round and so cannot run client-side);
4. apply the subclass's rule (``_rule``) and return the new global ArrayRecord
   plus a MetricRecord (clients' metrics averaged as in FedAvg, without the
   ordering key, plus ``num-flagged``);
5. append ``{"round", "client_ids", "id_source", "weights", "flagged", ...}``
   to the public :attr:`RobustFedAvg.history`, so a robustness report can read
   the weight each (e.g. malicious) client received in each round.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from torch import Tensor

from .attacks import get_attack, poison_updates
from .robust import Aggregate
from .vectors import flatten_state, stack_states, unflatten_state


@dataclass(frozen=True)
class ServerSideAttack:
    """Model attack injected by the server simulation on the uploads of ``malicious_ids``.

    ``malicious_ids`` are client ids as the strategy orders them (partition ids
    when clients report them). ``params`` go to the attack function; its
    generator is seeded from ``seed`` and the round number.
    """

    name: str
    malicious_ids: Collection[int]
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        get_attack(self.name, "model")  # fail at construction on unknown names


def _reply_state(msg: Message) -> dict[str, torch.Tensor]:
    record = next(iter(msg.content.array_records.values()))
    return {k: v.clone() for k, v in record.to_torch_state_dict().items()}


def _reply_metrics(msg: Message) -> MetricRecord:
    return next(iter(msg.content.metric_records.values()))


def _metric_number(msg: Message, key: str) -> int | float:
    """A metric the client reports as one number (a MetricRecord may also hold lists)."""
    return cast("int | float", _reply_metrics(msg)[key])


def _stack_replies(replies: list[Message], template: dict[str, Tensor]) -> Tensor:
    """``[n, dim]`` matrix of the replies' full states, in ``template``'s key order."""
    states = [_reply_state(m) for m in replies]
    if any(set(s) != set(template) for s in states):
        raise ValueError("replies: ArrayRecord keys differ from the global model's keys")
    return stack_states([{k: s[k] for k in template} for s in states])


class RobustFedAvg(FedAvg):
    """FedAvg whose ``aggregate_train`` applies a robust rule on ordered client updates.

    Extra arguments: ``order_key`` (MetricRecord key of the client's stable id,
    default ``"partition-id"``) and ``attack`` (optional :class:`ServerSideAttack`).
    All other keyword arguments go to Flower's ``FedAvg``. ``flags_clients`` says whether the rule
    flags clients as Byzantine (detection precision and recall mean something) or only weighs them.
    """

    flags_clients = True

    def __init__(
        self, *, order_key: str = "partition-id", attack: ServerSideAttack | None = None, **fedavg: Any
    ) -> None:
        super().__init__(**fedavg)
        self.order_key = order_key
        self.attack = attack
        self.history: list[dict[str, Any]] = []
        self.global_arrays: ArrayRecord | None = None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the global model of this round (rules act on updates), then sample as FedAvg."""
        self.global_arrays = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def _ordered(self, replies: list[Message]) -> tuple[list[Message], list[int], str]:
        """Replies sorted by client id, the ids, and where the ids came from."""
        if all(self.order_key in _reply_metrics(m) for m in replies):
            ids, source = [int(_metric_number(m, self.order_key)) for m in replies], self.order_key
        else:
            ids, source = [int(m.metadata.src_node_id) for m in replies], "node-id"
        order = sorted(range(len(replies)), key=lambda i: ids[i])
        return [replies[i] for i in order], [ids[i] for i in order], source

    def _num_examples(self, replies: list[Message]) -> torch.Tensor:
        return torch.tensor([float(_metric_number(m, self.weighted_by_key)) for m in replies])

    def _inject(self, server_round: int, ids: list[int], updates: Tensor, global_vec: Tensor) -> Tensor:
        if self.attack is None:
            return updates
        mask = torch.tensor([cid in set(self.attack.malicious_ids) for cid in ids])
        gen = torch.Generator().manual_seed(self.attack.seed * 1_000_003 + server_round)
        if get_attack(self.attack.name, "model").full_model:
            full = poison_updates(self.attack.name, updates + global_vec, mask, gen, **self.attack.params)
            return full - global_vec
        return poison_updates(self.attack.name, updates, mask, gen, **self.attack.params)

    @abstractmethod
    def _rule(
        self,
        server_round: int,
        updates: Tensor,
        num_examples: Tensor,
        global_vec: Tensor,
        template: dict[str, Tensor],
    ) -> tuple[Aggregate, dict[str, Any]]:
        """Subclasses: the aggregate of ``updates`` and extra history fields."""

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Order replies, build updates, apply the rule, record history (see module doc)."""
        valid, _ = self._check_and_log_replies(replies, is_train=True)
        if not valid:
            return None, None
        if self.global_arrays is None:
            raise RuntimeError("global_arrays: unset; configure_train must run before aggregate_train")
        valid, ids, id_source = self._ordered(valid)
        template = {k: v.clone() for k, v in self.global_arrays.to_torch_state_dict().items()}
        global_vec = flatten_state(template)
        updates = self._inject(server_round, ids, _stack_replies(valid, template) - global_vec, global_vec)
        result, extra = self._rule(server_round, updates, self._num_examples(valid), global_vec, template)
        new_state = unflatten_state(global_vec + result.update, template)
        self.history.append(
            {
                "round": server_round,
                "client_ids": ids,
                "id_source": id_source,
                "weights": [float(w) for w in result.weights],
                "flagged": [bool(f) for f in result.flagged],
                **extra,
            }
        )
        return ArrayRecord(new_state), self._metrics(valid, result)

    def _metrics(self, valid: list[Message], result: Aggregate) -> MetricRecord:
        metrics = self.train_metrics_aggr_fn([m.content for m in valid], self.weighted_by_key)
        if self.order_key in metrics:
            del metrics[self.order_key]  # an averaged id means nothing
        metrics["num-flagged"] = int(result.flagged.sum())
        return metrics
