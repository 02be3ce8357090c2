"""The contract every registered strategy keeps, checked over the registry rather than copied per rule.

Each strategy is built from its own declaration (`testbed.federated.strategies.base.StrategyPlugin`)
on a small real federation (digits, an MLP; no Ray, no Flower simulation) and handed hand-made
uploads as the round loop would hand them: it must give a finite model of the global model's shapes,
at the fewest clients it declares it needs; its aggregation time must grow with the number of
uploads no faster than its declared ``cost_class``; validation must refuse, in one line, fewer
clients than it declares. A last test checks that the registry is read off the declarations: one
module per built-in strategy, named after it, and no table elsewhere in the code that lists them.
"""

from __future__ import annotations

import ast
import gc
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, Metadata, MetricRecord, RecordDict

from testbed.determinism import single_threaded
from testbed.federated.client import PARTITION_KEY
from testbed.federated.setup import FederationSetup, federation_setup
from testbed.federated.strategies import builtin_strategies, registered_strategies
from testbed.federated.strategies.base import StrategyPlugin
from testbed.scenario import Scenario
from tests.core.test_bad_input_corpus import DELETE, Case, Replace, assert_refused_cleanly

REPO = Path(__file__).resolve().parents[2]
STRATEGIES = sorted(registered_strategies())
# Settings that keep the two strategies that train on the server small (the rest use their defaults).
SMALL: dict[str, dict[str, Any]] = {"sdea": {"epochs": 1, "batch_size": 8, "public": {"size": 16}},
                                   "fltrust": {"root_size": 20}}
EXPONENT = {"linear": 1, "quadratic": 2}  # the declared cost class: time ~ n^exponent
# Headroom over the declared exponent for timing noise (a shared machine). Measured from 16 to 128
# uploads, the linear rules grow as n^0.7-1.0 (fixed costs per round weigh at 16); a rule declared
# linear that loops over all pairs of uploads measured n^1.6, so the headroom is below that.
SLACK = 0.4


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """What Flower's ServerApp sets before a strategy writes messages (``configure_train`` does)."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    for attribute, value in (("_run_id", 1), ("_node_id", SUPERLINK_NODE_ID), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attribute, value)


class NodeGrid:
    """The one part of a Flower Grid a strategy's ``configure_train`` reads: which nodes are there."""

    def __init__(self, n: int):
        self.n = n

    def get_node_ids(self) -> list[int]:
        return list(range(1, self.n + 1))


def _setup(name: str, num_clients: int, hidden: int = 32) -> FederationSetup:
    return federation_setup(Scenario.model_validate({
        "name": "contract", "kind": "federated", "seed": 3,
        "data": {"dataset": "digits", "num_clients": max(num_clients, 2), "partition": {"type": "iid"}},
        "workload": {"name": "classifier", "arch": "mlp", "hidden": hidden},
        "federated": {"rounds": 1, "strategy": {"name": name, **SMALL.get(name, {})}},
    }))


def _reply(state: dict[str, torch.Tensor], partition: int) -> Message:
    """A client's reply as the round loop receives it: its model and the metrics strategies read."""
    metrics = MetricRecord({"num-examples": 10 + partition, "train_loss": 1.0 + 0.1 * partition,
                            PARTITION_KEY: partition})
    meta = Metadata(run_id=1, message_id=f"m{partition}", src_node_id=partition + 1, dst_node_id=0,
                    reply_to_message_id=f"i{partition}", group_id="1", created_at=time.time(), ttl=60.0,
                    message_type=MessageType.TRAIN)
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": metrics})
    return Message(content, metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def _uploads(global_state: dict[str, torch.Tensor], n: int) -> list[Message]:
    """``n`` hand-made uploads: the global model plus a small, different step for each client."""
    rng = np.random.default_rng(11)
    return [_reply({key: value + torch.from_numpy(rng.normal(0, 0.01, tuple(value.shape))).to(value.dtype)
                    for key, value in global_state.items()}, partition) for partition in range(n)]


class Round:
    """One strategy built from its declaration on a federation of ``n`` clients, its round 1 configured."""

    def __init__(self, name: str, n: int, f: int = 0, hidden: int = 32):
        self.declared: type[StrategyPlugin] = registered_strategies()[name]
        setup = _setup(name, n, hidden)
        config = self.declared.Config.model_validate({**SMALL.get(name, {}), **self._told(f)})
        self.strategy = self.declared.build(config, setup, f)
        self.global_state = setup.build_model().state_dict()
        self.replies = _uploads(self.global_state, n)
        self.configure()

    def configure(self) -> None:
        """Send round 1's model out, as the round loop does before every aggregation (FedOpt and
        q-FedAvg keep it, and q-FedAvg empties it as it aggregates)."""
        nodes = NodeGrid(max(len(self.replies), 2))
        self.strategy.configure_train(1, ArrayRecord(self.global_state), ConfigRecord(), nodes)  # type: ignore[arg-type]

    def _told(self, f: int) -> dict[str, Any]:
        return {"num_malicious": f} if "num_malicious" in self.declared.Config.model_fields else {}

    def aggregate(self, replies: list[Message] | None = None) -> dict[str, torch.Tensor]:
        """The rule's aggregate of ``replies`` (default: the round's uploads, used once: Flower's
        rules empty the records they read, ``to_numpy_ndarrays(keep_input=False)``)."""
        with single_threaded():
            arrays, _ = self.strategy.aggregate_train(1, self.replies if replies is None else replies)
        assert arrays is not None
        return arrays.to_torch_state_dict()


def _assert_a_model_like(result: dict[str, torch.Tensor], template: dict[str, torch.Tensor]) -> None:
    assert {key: tuple(v.shape) for key, v in result.items()} == {key: tuple(v.shape) for key, v in template.items()}
    assert all(bool(v.isfinite().all()) for v in result.values())


@pytest.mark.parametrize("name", STRATEGIES)
def test_it_aggregates_hand_made_uploads_into_a_finite_model_of_the_same_shapes(name):
    round_ = Round(name, 6)
    result = round_.aggregate()
    _assert_a_model_like(result, round_.global_state)
    # It did aggregate: the uploads all moved away from the global model, so must the result.
    assert any(not torch.equal(result[k], round_.global_state[k]) for k in result), name


@pytest.mark.parametrize("name", STRATEGIES)
def test_it_aggregates_the_fewest_clients_it_declares_it_needs(name):
    f = 1
    fewest = registered_strategies()[name].min_clients(f)
    round_ = Round(name, fewest, f)
    _assert_a_model_like(round_.aggregate(), round_.global_state)


STREAMED = [name for name in STRATEGIES if registered_strategies()[name].streamed]


def test_the_mean_rules_and_only_they_declare_streamed_uploads():
    assert set(STREAMED) >= {"fedavg", "fedavgm", "fedprox", "fedadagrad", "fedadam", "fedyogi"}
    assert not set(STREAMED) & {"krum", "multikrum", "bulyan", "fedmedian", "fedtrimmedavg", "qfedavg", "dnc", "rfa",
                                "fltrust", "sdea"}


@pytest.mark.parametrize("name", STREAMED)
def test_a_strategy_that_declares_streamed_uploads_aggregates_them_staged_bit_for_bit(tmp_path, name):
    """What ``streamed`` promises the round loop: staging the uploads (`StagedUploads`) and handing the
    rule their mean gives the very model it makes of the whole replies."""
    from testbed.federated.server import RoundReplies, aggregate_staged
    from testbed.federated.staging import StagedUploads

    whole, streamed = Round(name, 5), Round(name, 5)
    expected = whole.aggregate()
    received = RoundReplies(replies=None)
    with StagedUploads(tmp_path, budget_bytes=0) as staged:
        for reply in reversed(streamed.replies):
            received.add(reply)
            staged.add(int(reply.content["metrics"][PARTITION_KEY]), reply.content["arrays"])
        received.sort()
        with single_threaded():
            got = aggregate_staged(streamed.strategy, 1, received, staged)
    assert got is not None
    got_state = got.to_torch_state_dict()
    assert all(got_state[key].numpy().tobytes() == expected[key].numpy().tobytes() for key in expected), name


def _cpu_seconds(round_: Round, repeats: int = 3) -> float:
    """The best of a few aggregations' process CPU time (the least disturbed by other processes), each
    of fresh uploads. The test's own heap is frozen first: Flower's rules call ``gc.collect`` once per
    upload they read, which would otherwise cost as much as the test process has objects."""
    best = math.inf
    gc.freeze()
    try:
        for _ in range(repeats):
            replies = _uploads(round_.global_state, len(round_.replies))
            round_.configure()
            started = time.process_time()
            round_.aggregate(replies)
            best = min(best, time.process_time() - started)
    finally:
        gc.unfreeze()
    return best


@pytest.mark.parametrize("name", STRATEGIES)
def test_its_aggregation_time_grows_with_the_uploads_no_faster_than_its_declared_cost(name):
    declared = registered_strategies()[name]
    small, large = 16, 128
    times = [_cpu_seconds(Round(name, n, hidden=64)) for n in (small, large)]
    exponent = math.log(max(times[1], 1e-9) / max(times[0], 1e-9)) / math.log(large / small)
    assert exponent <= EXPONENT[declared.cost_class] + SLACK, (
        f"{name} declares {declared.cost_class} cost, but 4x the uploads took {times[1] / times[0]:.1f}x the time")


def _limited() -> list[tuple[str, int, int]]:
    """(strategy, f, the clients it needs against f) for every strategy that declares a need above
    what any federation has (2 clients) for some f it can be told."""
    cases = []
    for name in STRATEGIES:
        declared = registered_strategies()[name]
        told = "num_malicious" in declared.Config.model_fields
        need = next(((f, declared.min_clients(f)) for f in range(0, 4)
                     if declared.min_clients(f) > 2 and (told or f == 0)), None)
        if need is not None:
            cases.append((name, *need))
    return cases


LIMITED = _limited()


def test_the_robust_rules_declare_a_client_count_they_need():
    assert {"krum", "multikrum", "bulyan", "dnc"} <= {name for name, _, _ in LIMITED}


@pytest.mark.parametrize(("name", "f", "needed"), LIMITED, ids=[name for name, _, _ in LIMITED])
def test_validation_refuses_fewer_clients_than_it_declares_in_one_line(cli, tmp_path, monkeypatch, name, f, needed):
    case = Case(f"strategy-{name}-too-few-clients", "federated",
                {"data": {"num_clients": needed - 1}, "federated": {"attack": DELETE, "strategy": Replace(
                    {"name": name, **SMALL.get(name, {}), **({"num_malicious": f} if f else {})})}},
                ("data.num_clients", f"strategy '{name}'", f"at least {needed} clients", f"has {needed - 1}"))
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


# --- the registry is derived from the declarations -----------------------------------------------

PACKAGE = REPO / "testbed" / "federated" / "strategies"


def test_every_built_in_strategy_is_one_declaration_in_its_own_module_and_the_registry_is_that_class():
    built_in = list(builtin_strategies())
    assert len(built_in) >= 16 and len({cls.name for cls in built_in}) == len(built_in)
    for cls in built_in:
        # One module per strategy, named after it: adding one is adding a file.
        assert cls.__module__ == f"testbed.federated.strategies.{cls.name}", cls
        # Its name, summary, build and capabilities are written on the class itself ...
        assert {"name", "summary", "cost", "build"} <= set(vars(cls)), cls
        assert cls.cost.startswith("O(") and cls.cost_class in EXPONENT
        # ... its config is its own nested class or a shared one it names (or the no-parameter default)
        assert "Config" in vars(cls) or cls.Config is StrategyPlugin.Config, cls
        # ... and the registry holds the class, so everything it answers comes from there.
        assert registered_strategies()[cls.name] is cls


def _collections_of_strategy_names(path: Path, names: set[str]) -> list[tuple[int, set[str]]]:
    """The literal dicts, sets, lists and tuples in ``path`` that hold two or more strategy names."""
    from tests.core.test_registries import _displays

    held = ((line, strings & names) for line, _, strings in _displays(ast.parse(path.read_text(), str(path))))
    return [(line, found) for line, found in held if len(found) >= 2]


def test_no_second_table_lists_the_built_in_strategies():
    """A table of strategy names kept beside the declarations (a registry, a set of mean rules, a
    type list of streamed strategies) must agree with them by hand: there is none in the code."""
    names = {cls.name for cls in builtin_strategies()}
    sources = [p for root in ("testbed", "strategies") for p in sorted((REPO / root).rglob("*.py"))]
    tables = {f"{path.relative_to(REPO)}:{line}": held for path in sources
              for line, held in _collections_of_strategy_names(path, names)}
    assert not tables, tables
