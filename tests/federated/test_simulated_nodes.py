"""A simulation's nodes registered in bulk (`testbed.federated.simulated_nodes`) read as Flower's own
registration reads, keep what a state method changes, and cost bytes, not kilobytes, a node."""

from __future__ import annotations

import contextlib
import gc
from typing import Any, cast

import numpy as np
import pytest
from flwr.proto.node_pb2 import NodeInfo
from flwr.supercore.constant import NodeStatus

from testbed.federated.simulated_nodes import SimulatedNodes, random_node_ids

COMPARED = ("owner_aid", "owner_name", "status", "heartbeat_interval", "online_until")


def _registered(nodes: int, indexed: bool) -> tuple[Any, dict[int, int], int]:
    """A SuperLink state with ``nodes`` nodes registered as a simulation registers them, and a run."""
    from flwr.proto.task_pb2 import Task
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.superlink.federation import NoOpFederationManager

    from testbed.federated.linkstate import indexed_simulation

    factory = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    with indexed_simulation() if indexed else contextlib.nullcontext():
        state = cast(Any, factory.state())  # the in-memory state, with its stores
        run = Run.create_empty(run_id=7)
        run.federation_id = NOOP_FEDERATION_ID
        state.run_ids[run.run_id] = RunRecord(run=run)
        state.task_store[1] = Task(task_id=1, run_id=run.run_id)
        mapping = vce_api._register_nodes(num_nodes=nodes, state_factory=factory)
    return state, mapping, run.run_id


def test_bulk_nodes_read_as_flowers_own_registration_reads():
    flowers, flower_mapping, run_id = _registered(40, indexed=False)
    ours, mapping, _ = _registered(40, indexed=True)
    assert isinstance(ours.nodes, SimulatedNodes) and not isinstance(flowers.nodes, SimulatedNodes)
    assert sorted(mapping.values()) == sorted(flower_mapping.values()) == list(range(40))
    assert list(ours.nodes) == list(mapping) and len(ours.nodes) == 40  # registration (partition) order
    assert ours.get_nodes(run_id) == set(mapping) and len(flowers.get_nodes(run_id)) == 40
    reference = next(iter(flowers.nodes.values()))
    for node_id in mapping:
        node = ours.nodes[node_id]
        assert node.node_id == node_id and node_id in ours.nodes
        assert [getattr(node, f) for f in COMPARED] == [getattr(reference, f) for f in COMPARED]
    assert node.status == NodeStatus.ONLINE and node.online_until > 1e299
    assert 12345 not in ours.nodes and ours.nodes.get(12345) is None


def test_a_bulk_node_keeps_what_a_state_method_changes():
    state, mapping, run_id = _registered(10, indexed=True)
    first, *bulk = mapping
    node = bulk[3]
    assert state.deactivate_node(node)
    assert state.nodes[node].status == NodeStatus.OFFLINE and state.get_nodes(run_id) == set(mapping) - {node}
    assert state.activate_node(node, heartbeat_interval=30.0)
    assert state.nodes[node].status == NodeStatus.ONLINE and state.nodes[node].heartbeat_interval == 30.0
    assert state.get_nodes(run_id) == set(mapping)
    # the other nodes are untouched, and the changed one is listed once
    assert state.nodes[bulk[4]].heartbeat_interval != 30.0 and list(state.nodes) == list(mapping)
    owner = state.nodes[node].owner_aid
    state.delete_node(owner, node)
    assert state.nodes[node].status == NodeStatus.UNREGISTERED and node not in state.get_nodes(run_id)
    with pytest.raises(ValueError, match="already unregistered"):
        state.delete_node(owner, node)
    with pytest.raises(KeyError):
        del state.nodes[bulk[0]]


def test_nodes_created_one_by_one_sit_beside_the_bulk_ones():
    nodes = SimulatedNodes()
    single = NodeInfo(node_id=5, status=NodeStatus.REGISTERED)
    nodes[5] = single
    nodes.add_bulk(np.array([9, 7, 11], dtype=np.uint64), NodeInfo(status=NodeStatus.ONLINE))
    nodes[3] = NodeInfo(node_id=3, status=NodeStatus.ONLINE)
    assert list(nodes) == [5, 9, 7, 11, 3] and len(nodes) == 5
    assert nodes.with_status(NodeStatus.ONLINE) == {9, 7, 11, 3} and nodes[5] is single
    del nodes[3]
    assert len(nodes) == 4 and 3 not in nodes
    with pytest.raises(RuntimeError, match="once"):
        nodes.add_bulk(np.array([1], dtype=np.uint64), NodeInfo())


def test_random_ids_are_distinct_and_avoid_the_excluded():
    ids = random_node_ids(5000, exclude={0, 1})
    assert len(ids) == len(set(ids.tolist())) == 5000 and not {0, 1} & set(ids.tolist())


def _rss_anon_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("RssAnon"))


def test_a_bulk_node_costs_bytes_not_kilobytes():
    # Flower's own registration holds a NodeInfo and a public key per node, about 1.6 KB; here the
    # id in two arrays and the partition mapping's entry, under 0.4 KB (the mapping is most of it).
    _registered(10, indexed=True)  # Flower's modules imported before the measurement
    gc.collect()
    before = _rss_anon_bytes()
    state, mapping, _ = _registered(50_000, indexed=True)
    gc.collect()
    per_node = (_rss_anon_bytes() - before) / 50_000
    assert len(cast(SimulatedNodes, state.nodes)) == len(mapping) == 50_000
    assert per_node < 400, f"{per_node:.0f} bytes a node"
