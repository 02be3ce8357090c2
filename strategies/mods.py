"""The attacks of :mod:`strategies.attacks` for any Flower 1.42 app: client mods, and a strategy
wrapper for the attacks a client cannot play alone.

Make clients Byzantine in one line of a plain Flower app::

    app = ClientApp(mods=[byzantine_mod("sign_flip", partition_ids={0, 1}, scale=2.0)])

* Model attacks (``sign_flip``, ``gaussian``, ``random_noise``, ``add_noise``): the mod lets the
  client train, then rewrites its reply: the update ``local - global`` (global: the ArrayRecord the
  server sent) goes through the attack, ``global + attacked`` is uploaded. ``random_noise`` and
  ``add_noise`` take the first global model the client saw as their untrained network (kept in
  ``context.state``), as SDEA's code keeps its initial network.
* Data and backdoor attacks (``pair_flip``, ``sym_flip``, ``badnets``, ``model_replacement``): a mod
  sees messages, not the app's training data, so the mod marks the client in ``context.state`` and
  the app passes its data through :func:`poisoned_data` (``x, y = poisoned_data(context, x, y,
  num_classes)``), which leaves honest clients' data as it is. ``model_replacement``'s mod also boosts
  the upload (:func:`strategies.backdoor.scale_update`, ``boost`` required here: the mod does not
  know the federation's size).
* Omniscient attacks (LIE, Min-Max, Min-Sum) craft the upload from every benign update of the round,
  which no client sees: they need a server-side hook, :class:`ServerSideAttackStrategy`, which wraps
  any Flower strategy and replaces the chosen clients' replies in ``aggregate_train`` before
  delegating (``byzantine_mod`` refuses them and names the wrapper).

Clients are named by ``partition-id`` (``context.node_config`` in a simulation; the wrapper reads the
``partition-id`` each client reports in its MetricRecord). Randomness comes from ``seed``, the round
(``server-round`` of the ConfigRecord Flower's strategies send) and the partition id.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from torch import Tensor

from .attacks import get_attack, poison_data, poison_labels, poison_updates
from .backdoor import scale_update
from .base import ServerSideAttack
from .vectors import flatten_state, unflatten_state

Mod = Callable[[Message, Context, Callable[[Message, Context], Message]], Message]
MARK = "byzantine"  # the context.state ConfigRecord that marks a data or backdoor attacker
INIT = "byzantine.init"  # the first global model a full-model attacker saw


def _generator(seed: int, server_round: int, partition_id: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + server_round) * 10_007 + partition_id)


def _round(msg: Message) -> int:
    config = msg.content.config_records
    value = next(iter(config.values())).get("server-round", 0) if config else 0
    return int(value)  # type: ignore[arg-type]  # flwr types a record's values as those of any record


def _arrays(msg: Message) -> tuple[str, ArrayRecord]:
    return next(iter(msg.content.array_records.items()))


def byzantine_mod(name: str, partition_ids: Collection[int], *, seed: int = 0, **params: Any) -> Mod:
    """A Flower client mod that makes the clients ``partition_ids`` play attack ``name`` (module doc)."""
    attack = get_attack(name)
    if attack.omniscient:
        raise ValueError(f"name: {name!r} crafts its upload from every benign update of the round, which no "
                         "client sees; wrap the server's strategy in ServerSideAttackStrategy instead")
    if attack.boosted and params.get("boost") is None:
        raise ValueError("boost: required by the model_replacement mod (e.g. clients per round / attackers)")
    chosen = frozenset(int(p) for p in partition_ids)
    data_params = {k: v for k, v in params.items() if k != "boost"}

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        partition_id = int(context.node_config["partition-id"])
        if partition_id not in chosen or not msg.content.array_records:
            return call_next(msg, context)
        if attack.kind in ("data", "backdoor"):
            context.state[MARK] = ConfigRecord({"name": name, "seed": seed, **data_params})
        reply = call_next(msg, context)
        if reply.has_error() or attack.kind == "data" or (attack.kind == "backdoor" and not attack.boosted):
            return reply
        global_state = _arrays(msg)[1].to_torch_state_dict()
        key, record = _arrays(reply)
        local_state = record.to_torch_state_dict()
        if attack.boosted:
            reply.content[key] = ArrayRecord(scale_update(global_state, local_state, float(params["boost"])))
            return reply
        generator = _generator(seed, _round(msg), partition_id)
        attacked = _model_attack(name, params, global_state, local_state, context, generator)
        reply.content[key] = ArrayRecord(unflatten_state(attacked, global_state))
        return reply

    return mod


def _model_attack(name: str, params: dict[str, Any], global_state: dict[str, Tensor], local_state: dict[str, Tensor],
                  context: Context, generator: torch.Generator) -> Tensor:
    """The attacked upload (a full state vector) of one client."""
    global_vec, local_vec = flatten_state(global_state), flatten_state(local_state)
    if get_attack(name).full_model:
        if INIT not in context.state:
            context.state[INIT] = ArrayRecord(global_state)
        init = flatten_state(context.state.array_records[INIT].to_torch_state_dict())
        return poison_updates(name, local_vec[None], torch.tensor([True]), generator, init=init, **params)[0]
    update = poison_updates(name, (local_vec - global_vec)[None], torch.tensor([True]), generator, **params)[0]
    return global_vec + update


def poisoned_data(context: Context, x: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """The app's training data as the client's ``byzantine_mod`` wants it: poisoned for a data or backdoor
    attacker (the same poison every round: drawn from the mod's seed and the partition id), as it is
    for everyone else."""
    if MARK not in context.state:
        return x, y
    spec = dict(context.state.config_records[MARK])
    name, seed = str(spec.pop("name")), int(spec.pop("seed"))  # type: ignore[arg-type]  # flwr: any value
    generator = _generator(seed, 0, int(context.node_config["partition-id"]))
    if get_attack(name).kind == "data":
        return x, poison_labels(name, y, num_classes, generator, **spec)  # type: ignore[arg-type]
    return poison_data(name, x, y, num_classes, generator, **spec)  # type: ignore[arg-type]


class ServerSideAttackStrategy(Strategy):
    """Wraps any Flower strategy: the replies of ``attack.malicious_ids`` (their ``partition-id``
    metric) are replaced by model attack ``attack.name`` in ``aggregate_train``, which sees every
    benign reply of the round (the hook LIE, Min-Max and Min-Sum need), then the wrapped strategy
    aggregates them."""

    def __init__(self, strategy: Strategy, attack: ServerSideAttack, *, order_key: str = "partition-id") -> None:
        self.strategy, self.attack, self.order_key = strategy, attack, order_key
        self.global_arrays: ArrayRecord | None = None

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.global_arrays = arrays
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        valid = [r for r in replies if not r.has_error()]
        if valid and self.global_arrays is not None:
            self._poison(server_round, valid)
        return self.strategy.aggregate_train(server_round, replies)

    def _poison(self, server_round: int, replies: list[Message]) -> None:
        assert self.global_arrays is not None  # configure_train ran
        template = self.global_arrays.to_torch_state_dict()
        global_vec = flatten_state(template)
        ids = [int(next(iter(r.content.metric_records.values()))[self.order_key])  # type: ignore[arg-type]
               for r in replies]
        mask = torch.tensor([i in set(self.attack.malicious_ids) for i in ids])
        if not bool(mask.any()):
            return
        states = torch.stack([flatten_state(_arrays(r)[1].to_torch_state_dict()) for r in replies])
        generator = torch.Generator().manual_seed(self.attack.seed * 1_000_003 + server_round)
        if get_attack(self.attack.name).full_model:
            poisoned = poison_updates(self.attack.name, states, mask, generator, **self.attack.params)
        else:
            poisoned = global_vec + poison_updates(self.attack.name, states - global_vec, mask, generator,
                                                   **self.attack.params)
        for row, reply in enumerate(replies):
            if mask[row]:
                reply.content[_arrays(reply)[0]] = ArrayRecord(unflatten_state(poisoned[row], template))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.strategy.summary()
