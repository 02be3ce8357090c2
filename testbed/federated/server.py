"""The server side of a federated run: Flower's ServerApp driving the scenario's strategy round by round.

The loop follows Flower's `Strategy.start` (configure_train, send_and_receive, aggregate_train) but
keeps the scenario's global round numbers, checkpoints after rounds and resumes from them, orders
replies by partition id before aggregation (so sums are taken in the same order on every run), and
plays the model-poisoning adversary: an *omniscient* attacker who sees every benign reply of the
round before writing the Byzantine clients' uploads (LIE, Min-Max and Min-Sum need that; simpler
attacks ignore it).

The loop runs in Flower's ServerApp thread. `RoundLoop.stop` ends it at once (the runner sets it on
Ctrl-C, see `testbed.federated.runner`): the round in flight is abandoned unrecorded, nothing more
is written, and Flower's simulation engine returns normally, stopping its actors and Ray; the
resumed run computes that round again from the last checkpoint.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Strategy

from testbed.determinism import single_threaded
from testbed.errors import ResumableFailure, UserError
from testbed.federated.attacks import registered_attacks
from testbed.federated.backdoor import backdoor_metrics
from testbed.federated.client import PARTITION_KEY
from testbed.federated.clients_record import (
    ClientsRound,
    append_round,
    clients_round,
    learned_weights,
    rewind,
    round_metrics,
)
from testbed.federated.dp import dp_checkpoint, restore_dp
from testbed.federated.optimizer_state import optimizer_checkpoint, restore_optimizer
from testbed.federated.privacy import RoundAccountant, last_round, privacy_metrics, round_accountant
from testbed.federated.sampling import QUERY_PARTITION, SampledGrid, sample_clients
from testbed.federated.setup import FederationSetup
from testbed.federated.staging import StagedUploads
from testbed.federated.strategies import StrategyPlugin, answering
from testbed.runner import RunContext
from testbed.strategies import poison_updates
from testbed.strategies.marsfl import parameter_mask, poison_states
from testbed.strategies.vectors import flatten_state, unflatten_state
from testbed.workloads.base import FederatedWorkload
from testbed.workloads.registry import workload_class

PULL_INTERVAL_S = 0.1  # how often a round polls for replies (Flower's InMemoryGrid default)...
PULL_SCAN = 256  # ... while at most this many are in flight: a pull costs Flower O(in flight)
# Instructions in Flower's state at once: each poll costs Flower O(in flight), so a round of 10^5
# clients is pushed in windows rather than at once (the replies are the same).
IN_FLIGHT = 1024


class RoundInterrupted(Exception):
    """The run was interrupted while a round waited for its replies."""


def build_messages_as_pushed(strategy: Strategy) -> None:
    """Make ``strategy`` (or the strategy a Flower wrapper such as DP's holds) build each message of a
    round as the round pushes it, `IN_FLIGHT` at a time.

    Flower's FedAvg family builds every sampled node's message before the first is sent, about
    0.8 KB each: 0.8 GB of a 10^6-client round's driver. The messages are the same, made by
    Flower's `Message` constructor with the same shared content; only their creation time moves to
    their push (a message's TTL then counts from when it could be delivered). A strategy that is
    not of FedAvg's family, or a wrapper that lists them (Flower's DP accounting), is unchanged.
    """
    if list(inspect.signature(FedAvg._construct_messages).parameters) != ["self", "record", "node_ids", "message_type"]:
        raise RuntimeError("flwr's FedAvg._construct_messages changed; testbed.federated.server needs updating")
    inner: Any = strategy
    while not isinstance(inner, FedAvg) and isinstance(getattr(inner, "strategy", None), Strategy):
        inner = inner.strategy
    if isinstance(inner, FedAvg):
        inner._construct_messages = _messages_as_pushed  # type: ignore[method-assign]  # this instance only


def _messages_as_pushed(record: RecordDict, node_ids: Iterable[int], message_type: str) -> Iterator[Message]:
    return (Message(content=record, message_type=message_type, dst_node_id=node) for node in node_ids)


def pull_interval(in_flight: int) -> float:
    """How long a round waits before its next pull: `PULL_INTERVAL_S`, longer in proportion past
    `PULL_SCAN` messages in flight (at most 4x), so that Flower's scan of them costs the driver a
    bounded share of a core. A full window of `IN_FLIGHT` is seconds of the clients' work, so a
    reply waits longer only where the next ones are long queued; a small round is not slowed."""
    return PULL_INTERVAL_S * min(4.0, max(1.0, in_flight / PULL_SCAN))


def partition_id(reply: Message) -> int:
    return int(reply.content["metrics"][PARTITION_KEY])  # type: ignore[arg-type]  # flwr: values of any record


def reply_metric(reply: Message, key: str) -> float:
    return float(reply.content["metrics"][key])  # type: ignore[arg-type]  # flwr: values of any record


@dataclass
class RoundReplies:
    """What a round kept of its successful replies, in partition-id order after `sort`: their
    partition ids, example counts and losses, and the replies themselves unless the uploads were
    staged (`StagedUploads`); the error reasons of the failed ones."""

    replies: list[Message] | None
    ids: list[int] = field(default_factory=list)
    examples: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    first: Message | None = None  # a reply, to address the strategy's one-reply mean to

    def add(self, reply: Message) -> None:
        self.first = self.first or reply
        self.ids.append(partition_id(reply))
        self.examples.append(reply_metric(reply, "num-examples"))
        self.losses.append(reply_metric(reply, "train_loss"))
        if self.replies is not None:
            self.replies.append(reply)

    def sort(self) -> None:
        order = sorted(range(len(self.ids)), key=self.ids.__getitem__)
        self.ids = [self.ids[i] for i in order]
        self.examples = [self.examples[i] for i in order]
        self.losses = [self.losses[i] for i in order]
        if self.replies is not None:
            self.replies = [self.replies[i] for i in order]


class RoundLoop:
    """Runs rounds ``start+1..rounds`` of a federated scenario inside a Flower ServerApp."""

    def __init__(self, ctx: RunContext, setup: FederationSetup, strategy: Strategy, start_round: int,
                 global_state: dict[str, torch.Tensor]):
        self.ctx, self.setup, self.strategy = ctx, setup, strategy
        build_messages_as_pushed(strategy)
        self.start_round, self.state = start_round, global_state
        self.error: BaseException | None = None
        self.clients_round: ClientsRound | None = None  # the round's per-client record (`clients_record`)
        self.stop = threading.Event()  # set from the driver's main thread: leave now, write nothing more
        self.nodes: dict[int, int] = {}  # partition id -> Flower node id, learned when clients are sampled
        self.declared = answering(setup)  # what the strategy declares: streamed uploads, client weights
        self.streaming = streams_uploads(self.declared, setup)
        self.accountant: RoundAccountant | None = None  # epsilon, stepped once a round (set by `run`)
        assert setup.scenario.workload is not None  # check_federated requires a federated workload
        workload = workload_class(setup.scenario.workload.name)
        assert issubclass(workload, FederatedWorkload)
        self.workload = workload

    def server_app(self) -> ServerApp:
        app = ServerApp()

        @app.main()
        def main(grid: Grid, context: Any) -> None:
            try:
                self.run(grid)
            except RoundInterrupted:
                pass  # the runner raises KeyboardInterrupt once Flower has returned
            except BaseException as err:  # Flower would only log it; the runner re-raises it
                self.error = err

        return app

    def run(self, grid: Grid) -> None:
        config = self.setup.scenario.federated
        assert config is not None  # a federated scenario
        rewind(self.ctx.run, self.start_round)  # as metrics.jsonl: the rounds after the checkpoint run again
        checkpoint = self.ctx.run.latest_checkpoint() if self.start_round else None
        restore_dp(self.strategy, checkpoint)
        restore_optimizer(self.strategy, checkpoint)  # FedAdam's moments, FedAvgM's momentum
        if config.sampling is not None:
            self.nodes = self._partition_nodes(grid)
        last = last_round(config, self.setup.num_clients)  # a privacy target may stop the run early
        self.accountant = round_accountant(config, self.setup.num_clients, self.start_round)
        with self.ctx.progress.task("rounds", total=last, completed=self.start_round) as advance:
            for server_round in range(self.start_round + 1, last + 1):
                record = self.one_round(grid, server_round)
                if self.stop.is_set():  # interrupted after the replies came: the round is not recorded
                    return
                self._check_finite(server_round, record)  # before the diverged model is recorded or checkpointed
                self.ctx.log_metrics(record)
                if self.clients_round is not None:
                    append_round(self.ctx.run, self.clients_round)
                if server_round % config.checkpoint_every == 0 or server_round == last:
                    self.ctx.run.save_checkpoint(server_round, {"global_state": self.state,
                                                                **dp_checkpoint(self.strategy),
                                                                **optimizer_checkpoint(self.strategy)})
                advance(1, record)

    def _check_finite(self, server_round: int, record: dict[str, Any]) -> None:
        """Stop a run whose global model or evaluated loss became infinite or NaN: every later round
        would aggregate NaNs (and a backdoor's success rate on a NaN model means nothing). The
        checkpoints written so far hold the rounds before, so the folder keeps them."""
        bad = next(((key, value) for key, value in record.items()
                    if "loss" in key and key != "train_loss" and isinstance(value, float) and not math.isfinite(value)),
                   None)
        if bad is None and all(bool(t.isfinite().all()) for t in self.state.values() if t.is_floating_point()):
            return
        what = f"{bad[0]} = {bad[1]}" if bad else "the global model has non-finite parameters"
        run = self.ctx.run
        kept = (f"; the checkpoints up to round {run.latest_step} in {run.path} are from before it"
                if run.has_checkpoint else "")
        where = f"{self.ctx.source}: " if self.ctx.source else ""
        raise UserError(f"{where}{', '.join(divergence_fields(self.setup.scenario))}: training diverged at round "
                        f"{server_round} ({what}); lower it{kept}")

    def one_round(self, grid: Grid, server_round: int) -> dict[str, Any]:
        federated = self.setup.scenario.federated
        assert federated is not None  # a federated scenario
        started = time.perf_counter()
        sample = sample_clients(federated.sampling, self.setup.num_clients, self.setup.seeds, server_round)
        round_grid = grid if federated.sampling is None else SampledGrid(grid, [self.nodes[p] for p in sample])
        messages = self.strategy.configure_train(server_round, ArrayRecord(self.state), ConfigRecord(), round_grid)
        with StagedUploads(self.ctx.run.path) if self.streaming else nullcontext() as staged:
            received = self._receive(grid, messages, federated.round_timeout_s, staged)
            self._require_every_client(server_round, received, len(sample))
            train_s = time.perf_counter() - started
            with single_threaded():
                attack_skipped = received.replies is not None and self._inject_attack(server_round, received.replies,
                                                                                       sample)
                aggregate_started = time.perf_counter()
                new_arrays = self._aggregate(server_round, received, staged)
                aggregation_s = time.perf_counter() - aggregate_started
                spilled = staged.spilled if staged is not None else 0
        with single_threaded():
            if new_arrays is not None:
                self.state = new_arrays.to_torch_state_dict()
            model = self.setup.build_model()
            model.load_state_dict(self.state)
            metrics = (self.workload.evaluate_model(model, self.setup.test)
                       | backdoor_metrics(self.setup, self.workload, model)  # attack success rate
                       | privacy_metrics(self.accountant, getattr(self.strategy, "audit", None)))
        benign_losses = [loss for pid, loss in zip(received.ids, received.losses) if pid not in self.setup.malicious]
        return {
            "round": server_round, **metrics,
            "train_loss": sum(benign_losses) / len(benign_losses) if benign_losses else float("nan"),
            "clients_requested": len(sample), "clients_trained": len(received.ids),
            "clients_failed": len(sample) - len(received.ids),
            **({} if federated.sampling is None else {"clients_sampled": sample}),
            **({"attack_skipped": 1} if attack_skipped else {}),
            **({"uploads_on_disk": spilled} if spilled else {}),
            "train_s": round(train_s, 4), "aggregation_s": round(aggregation_s, 6),
            **self._weights_record(server_round, received, new_arrays),
        }

    def _receive(self, grid: Grid, messages: Iterable[Message], timeout: float,
                 staged: StagedUploads | None) -> RoundReplies:
        """The round's replies: kept whole, or (``staged``) their uploads staged and their metrics kept."""
        received = RoundReplies(replies=None if staged is not None else [])
        for reply in self._send_and_receive(grid, messages, timeout):
            if reply.has_error():
                received.errors.append((reply.error.reason or "").strip())
                continue
            received.add(reply)
            if staged is not None:
                staged.add(partition_id(reply), reply.content["arrays"])  # type: ignore[arg-type]  # flwr: any record
        received.sort()
        return received

    def _aggregate(self, server_round: int, received: RoundReplies, staged: StagedUploads | None) -> ArrayRecord | None:
        """The strategy's aggregate of the round, from its replies or its staged uploads."""
        if staged is not None:
            return aggregate_staged(self.strategy, server_round, received, staged)
        assert received.replies is not None  # kept whole when not staged
        new_arrays, _ = self.strategy.aggregate_train(server_round, received.replies)
        return new_arrays

    def _require_every_client(self, server_round: int, received: RoundReplies, sampled: int) -> None:
        """Stop, keeping the last checkpoint, when sampled clients failed that the scenario did not make fail.

        A client lost to the infrastructure (a node that died, an actor Flower keeps re-using)
        would otherwise be aggregated away silently, round after round, and the run would end with
        numbers no other engine gives. Injected faults (``federated.faults``) are the experiment
        itself: those rounds go on with the clients that answered.
        """
        lost = sampled - len(received.ids)
        federated = self.setup.scenario.federated
        assert federated is not None  # a federated scenario
        if lost and federated.faults is None:
            reasons = [reason for reason in received.errors if reason]
            why = f" ({reasons[0].splitlines()[-1][:160]})" if reasons else ""
            failed, silent = len(received.errors), lost - len(received.errors)
            what = "; ".join(([f"{failed} of {sampled} clients failed{why}"] if failed else []) + (
                [f"{silent} of {sampled} clients did not reply within federated.round_timeout_s "
                 f"({federated.round_timeout_s:g} s)"] if silent else []))
            raise ResumableFailure(
                f"{self.ctx.run.path}: round {server_round}: {what}; the run stopped at its last checkpoint: "
                f"'testbed resume {self.ctx.run.path}' redoes the round on the nodes that are alive")

    def _partition_nodes(self, grid: Grid) -> dict[int, int]:
        """Which Flower node hosts each partition: asked once per run (node ids are random per run), so
        that a round can address its sample (`testbed.federated.sampling`)."""
        federated = self.setup.scenario.federated
        assert federated is not None  # a federated scenario
        n = self.setup.num_clients
        while len(node_ids := list(grid.get_node_ids())) < n:
            if self.stop.wait(PULL_INTERVAL_S):
                raise RoundInterrupted
        queries = [Message(RecordDict(), dst_node_id=node, message_type=MessageType.QUERY) for node in node_ids]
        replies = list(self._send_and_receive(grid, queries, federated.round_timeout_s))
        # flwr types a record's values as those of any record
        nodes = {int(r.content["metrics"][QUERY_PARTITION]): r.metadata.src_node_id  # type: ignore[arg-type]
                 for r in replies if not r.has_error()}
        if len(nodes) < n:
            raise ResumableFailure(f"{self.ctx.run.path}: {n - len(nodes)} of {n} clients did not say which partition "
                                   f"they hold; 'testbed resume {self.ctx.run.path}' asks again")
        return nodes

    def _send_and_receive(self, grid: Grid, messages: Iterable[Message], timeout: float) -> Iterator[Message]:
        """`Grid.send_and_receive`, yielding each reply as it is pulled: push up to `IN_FLIGHT`
        messages, then one more for each reply, until all replied or ``timeout``; leaves with
        `RoundInterrupted` as soon as `stop` is set."""
        if self.stop.is_set():
            raise RoundInterrupted
        waiting = iter(messages)
        pending: set[str] = set()
        deadline = time.time() + timeout
        while True:
            pending |= set(grid.push_messages(islice(waiting, IN_FLIGHT - len(pending))))
            if not pending or time.time() >= deadline:
                return
            pulled = list(grid.pull_messages(pending))
            pending -= {reply.metadata.reply_to_message_id for reply in pulled}
            yield from pulled
            if pending:  # a pull costs Flower O(in flight): pulled at its own pace, replies come in batches
                self.stop.wait(pull_interval(len(pending)))
            if self.stop.is_set():
                raise RoundInterrupted

    def _inject_attack(self, server_round: int, replies: list[Message], sample: Sequence[int] | None = None) -> bool:
        """Write the Byzantine replies of a model attack; True when the round's sample (default: every
        client) holds too few benign clients for an omniscient attack (it needs two), whose attackers
        then upload what they trained."""
        assert self.setup.scenario.federated is not None  # a federated scenario
        attack = self.setup.scenario.federated.attack
        if attack is None or registered_attacks()[attack.name].kind != "model" or not self.setup.malicious:
            return False
        mask = torch.tensor([partition_id(r) in self.setup.malicious for r in replies])
        if not bool(mask.any()):
            return False
        if registered_attacks()[attack.name].omniscient and int((~mask).sum()) < 2:
            return True
        template = self.state
        global_vector = flatten_state(template)
        # flwr types a RecordDict's items as any record
        states = torch.stack([flatten_state(r.content["arrays"].to_torch_state_dict())  # type: ignore[union-attr]
                              for r in replies])
        generator = self.setup.seeds.torch(f"attack.round.{server_round}")
        params = dict(attack.params)
        craft = registered_attacks()[attack.name].variants.get(attack.threat_model)  # marsfl's LIE, Min-Max, Min-Sum
        if craft is not None:
            asked = range(self.setup.num_clients) if sample is None else sample
            benign = sum(client not in self.setup.malicious for client in asked)
            poisoned = self._marsfl_uploads(attack.name, craft, states, global_vector, mask, generator, params, benign)
        elif registered_attacks()[attack.name].full_model:
            # The untrained network is the round-0 global model, sent every round (SDEA's code sends a
            # copy of its initial network). In round 1 that is a zero update.
            params["init"] = flatten_state(self.setup.build_model().state_dict())
            poisoned = poison_updates(attack.name, states, mask, generator, **params)
        else:
            poisoned = poison_updates(attack.name, states - global_vector, mask, generator, **params) + global_vector
        for row, reply in enumerate(replies):
            if mask[row]:
                reply.content["arrays"] = ArrayRecord(unflatten_state(poisoned[row], template))
        return False

    def _marsfl_uploads(self, name: str, craft: Callable[..., torch.Tensor], states: torch.Tensor,
                        global_vector: torch.Tensor, mask: torch.Tensor, generator: torch.Generator,
                        params: dict[str, Any], benign: int) -> torch.Tensor:
        """Threat model ``marsfl`` (`testbed.strategies.marsfl`): the crafted update written as the
        malicious models' parameters, their buffers kept. LIE counts as MarsFL does: ``n`` the clients
        that replied, ``m`` = ``n`` minus the benign clients the round asked (all the federation's
        without sampling; these replace any ``num_clients`` the scenario sets; ``z`` set in the
        scenario still wins over MarsFL's)."""
        names = {key for key, _ in self.setup.build_model().named_parameters()}
        if name == "lie":
            n = states.shape[0]
            params = params | {"num_clients": n, "num_malicious": n - benign}
        return poison_states(craft, states, global_vector, mask, parameter_mask(self.state, names), generator,
                             **params)

    def _weights_record(self, server_round: int, received: RoundReplies,
                        new_arrays: ArrayRecord | None) -> dict[str, Any]:
        """Weight the rule gave to Byzantine clients, detection quality for rules that flag, and how it
        treated each client (``attacker_auroc``, ``honest_zeroed``; the line `run` appends to clients.jsonl)."""
        ids = received.ids
        weights, flagged = (None, None) if self.declared is None else self.declared.client_weights(
            self.strategy, ids, received.replies, new_arrays, received.examples)
        if weights is None:
            self.clients_round = None
            return {}
        history = getattr(self.strategy, "history", [])  # SDEA's learned weights (`testbed.strategies.RobustFedAvg`)
        clients = self.clients_round = clients_round(server_round, ids, weights, flagged,
                                                     learned_weights(history, ids), self.setup.malicious)
        malicious = clients.byzantine
        # A sum in client order, as before the record held arrays: numpy's pairwise sum rounds otherwise.
        record: dict[str, Any] = {"malicious_weight": float(sum(clients.weight[malicious].tolist()))}
        if clients.flagged is not None:
            hits = int((clients.flagged & malicious).sum())
            record["detection_precision"] = (hits / int(clients.flagged.sum()) if clients.flagged.any()
                                             else (1.0 if not malicious.any() else 0.0))
            record["detection_recall"] = hits / int(malicious.sum()) if malicious.any() else 1.0
        judged = round_metrics(clients)
        if self.declared is not None and self.declared.streamed:
            # FedAvg's kind weighs each client by its data size: an AUROC of those weights measures
            # how much data the attackers hold, not a detection, so it is not recorded.
            judged.pop("attacker_auroc", None)
        return record | judged


# Strategy and attack parameters that scale the global model's step: the suspects of a divergence.
STEP_PARAMETERS = ("eta", "server_learning_rate", "q", "client_learning_rate")


def divergence_fields(scenario: Any) -> list[str]:
    """The fields a diverged federated run should lower: the step-scaling parameters the scenario
    sets (a strategy's server learning rate or q, model replacement's boost), else the clients' lr."""
    federated = scenario.federated
    fields = [f"federated.strategy.{key}" for key in STEP_PARAMETERS if key in federated.strategy.params]
    if federated.attack is not None and "boost" in federated.attack.params:
        fields.append("federated.attack.boost")
    return fields or ["workload.lr"]


def aggregate_staged(strategy: Strategy, server_round: int, received: RoundReplies,
                     staged: StagedUploads) -> ArrayRecord | None:
    """A streamed round's aggregate: the staged uploads' weighted mean (Flower's FedAvg arithmetic in
    partition order), handed to the strategy as the one reply whose mean it takes (times 1.0,
    exactly), so that its server optimizer (FedAvgM, FedAdam, ...) runs as on the whole replies."""
    if not received.ids:
        return None
    assert isinstance(strategy, FedAvg) and received.first is not None  # streamed strategies are FedAvg's kind
    mean = staged.weighted_mean(received.ids, received.examples)
    metrics = MetricRecord({strategy.weighted_by_key: sum(received.examples)})
    content = RecordDict({strategy.arrayrecord_key: mean, "metrics": metrics})
    new_arrays, _ = strategy.aggregate_train(server_round, [Message(content, reply_to=received.first)])
    return new_arrays


def streams_uploads(declared: type[StrategyPlugin] | None, setup: FederationSetup) -> bool:
    """Whether a round's uploads can be staged rather than kept as replies: the strategy declares
    that it takes FedAvg's weighted mean (``streamed``, and no DP wrapper stands between: ``declared``
    is None then), and no model attack rewrites replies (the omniscient adversary reads every benign
    upload of the round)."""
    federated = setup.scenario.federated
    assert federated is not None  # a federated scenario
    attack = federated.attack
    model_attack = attack is not None and registered_attacks()[attack.name].kind == "model"
    return declared is not None and declared.streamed and not model_attack
