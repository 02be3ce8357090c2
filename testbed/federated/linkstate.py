"""Flower's in-memory SuperLink state, indexed by destination node, so a simulation scales past 10^4 clients
(Ray and the client actors a run's simulations share: `testbed.federated.actor_pool`).

Flower 1.42's simulation engine moves every instruction through `InMemoryLinkState`: one thread
(`vce_api.add_messages_to_queue`) walks *every* registered node every 0.1 s and asks the state
for that node's next message, and `InMemoryLinkState.get_message_ins` answers by scanning *every*
stored message. With N nodes and N messages in flight a sweep costs N^2 checks: measured before
this module, one FedAvg round of 10,000 digits clients took 377 s in raw Flower (36 ms a client),
and 100,000 clients would take hours before the first reply.

`NodeIndexedLinkState` keeps, beside Flower's own stores, a queue of undelivered message ids per
destination node, filled by `store_message_ins` and consumed by `get_message_ins`; a message
deleted or expired meanwhile is skipped when its turn comes, as Flower's own scan would skip it.
`add_pending_messages_to_queue` is Flower's extractor loop walking only the nodes that have
undelivered messages (one per node per sweep, as Flower's does). Messages, replies, TTLs and
errors are Flower's own; only the lookups change, so every reply and every number is the same
(tests/federated/test_federation_scale.py checks that the indexed state delivers exactly what
Flower's delivers).

Flower also makes every node's client context before the first round (`vce_api.
_register_node_info_stores`: a `DeprecatedRunInfoStore`, its fused run config and a `Context`, about
1.4 KB a node, kept for the whole run), and keeps the context each reply brings back.
`TransientNodeStores` makes a node's store when its first message comes, exactly as Flower would
have made it, and drops it again when the client's reply leaves the context as it was made (no
state written, the node's config untouched): the next message makes the same context afresh. A
client that keeps state (an attacker's mark, SDEA's initial network) keeps its store, as in
Flower. Memory for contexts is then the clients in flight plus the stateful ones, not every node.

Flower keeps a `NodeInfo` and a random public key per node, about 1.6 KB a node in the driver though
a simulation's nodes are alike: `register_simulation_nodes` registers the first node as Flower does
and the rest as an id array sharing its `NodeInfo` (`testbed.federated.simulated_nodes`).

`indexed_simulation()` installs the four while a run's `run_simulation` starts. Why patch instead of
writing a simulation engine: everything else of Flower's engine (the Ray backend and its actor
pool, the contexts themselves, the ServerApp's grid) stays in use unchanged, and the replaced
functions are small and pinned (flwr>=1.42,<1.43 in pyproject.toml; `check_flower_internals` fails loudly if a Flower
release moves them).
"""

from __future__ import annotations

import inspect
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Queue
from typing import Any

from flwr.app import Context, Message
from flwr.common.constant import NUM_PARTITIONS_KEY, PARTITION_ID_KEY, SUPERLINK_NODE_ID
from flwr.compat.client.run_info_store import DeprecatedRunInfoStore
from flwr.proto.node_pb2 import NodeInfo
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.linkstate import linkstate_factory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.supercore.constant import NodeStatus
from flwr.supercore.date import now

from testbed.federated.simulated_nodes import SimulatedNodes, random_node_ids

# How often the extractor looks for new messages: Flower's own interval.
SWEEP_INTERVAL_S = 0.1


class NodeIndexedLinkState(InMemoryLinkState):
    """`InMemoryLinkState` whose per-node message lookup is O(1) instead of a scan of every message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # node id -> ids of its stored, not yet delivered instructions, in the order they were stored
        self._undelivered: dict[int, deque[str]] = {}
        self.nodes: SimulatedNodes = SimulatedNodes()  # type: ignore[assignment]  # a MutableMapping, not a dict

    # Flower's methods that change a node in place: the node gets a NodeInfo of its own first.
    def delete_node(self, owner_aid: str, node_id: int) -> None:
        with self.lock:
            self.nodes.own(node_id)
            super().delete_node(owner_aid, node_id)

    def activate_node(self, node_id: int, heartbeat_interval: float) -> bool:
        with self.lock:
            self.nodes.own(node_id)
            return super().activate_node(node_id, heartbeat_interval)

    def deactivate_node(self, node_id: int) -> bool:
        with self.lock:
            self.nodes.own(node_id)
            return super().deactivate_node(node_id)

    def acknowledge_node_heartbeat(self, node_id: int, heartbeat_interval: float) -> bool:
        with self.lock:
            self.nodes.own(node_id)
            return super().acknowledge_node_heartbeat(node_id, heartbeat_interval)

    def _check_and_tag_offline_nodes(self, node_ids: list[int] | None = None) -> None:
        with self.lock:
            if node_ids is None:  # every node: the bulk ones share one heartbeat deadline
                node_ids = self.nodes.changeable(now().timestamp())
                if not node_ids:
                    return  # (Flower's loop reads an empty list as every node)
            for node_id in node_ids:
                self.nodes.own(node_id)
            super()._check_and_tag_offline_nodes(node_ids)

    def get_nodes(self, run_id: int) -> set[int]:
        """Flower's `get_nodes` (the online nodes of the run's federation) without making a `NodeInfo`
        for each node."""
        with self.lock:
            if run_id not in self.run_ids:
                return set()
            self._check_and_tag_offline_nodes()
            federation_id = self.run_ids[run_id].run.federation_id
            return self.federation_manager.filter_nodes(self.nodes.with_status(NodeStatus.ONLINE), federation_id)

    def store_message_ins(self, message: Message) -> str | None:
        with self.lock:
            message_id = super().store_message_ins(message)
            if message_id is not None:
                self._undelivered.setdefault(message.metadata.dst_node_id, deque()).append(message_id)
            return message_id

    def pending_nodes(self) -> list[int]:
        """The nodes that have undelivered instructions, in the order their first one was stored."""
        with self.lock:
            return list(self._undelivered)

    def get_message_ins(self, node_id: int, limit: int | None, *, run_id: int | None = None) -> list[Message]:
        if limit is not None and limit < 1:
            raise AssertionError("`limit` must be >= 1")  # Flower's own check, same message
        found: list[Message] = []
        with self.lock:
            queue = self._undelivered.get(node_id)
            skipped: list[str] = []  # another run's messages stay queued, in their order
            while queue and (limit is None or len(found) < limit):
                message_id = queue.popleft()
                self._check_stored_messages({message_id})  # drops it if expired, as Flower's scan does
                message = self.message_ins_store.get(message_id)
                if message is None or message.metadata.delivered_at != "":
                    continue
                if run_id is not None and message.metadata.run_id != run_id:
                    skipped.append(message_id)
                    continue
                found.append(message)
            if queue is not None:
                queue.extendleft(reversed(skipped))
                if not queue:
                    del self._undelivered[node_id]
            delivered_at = now().isoformat()
            for message in found:
                message.metadata.delivered_at = delivered_at
        return found


def add_pending_messages_to_queue(state: Any, queue: Queue[Message], nodes_mapping: dict[int, int],
                                  f_stop: threading.Event) -> None:
    """Flower's `vce_api.add_messages_to_queue`, walking only the nodes with undelivered messages."""
    if not isinstance(state, NodeIndexedLinkState):  # another state: Flower's own loop
        _FLOWER_EXTRACTOR(state, queue, nodes_mapping, f_stop)
        return
    while not f_stop.is_set():
        for node_id in state.pending_nodes():
            if node_id in nodes_mapping:
                for message in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(message)
        f_stop.wait(SWEEP_INTERVAL_S)


class TransientNodeStores(dict[int, DeprecatedRunInfoStore]):
    """Flower's node id -> `DeprecatedRunInfoStore` mapping of a simulation, each store made on first
    use (as `_register_node_info_stores` makes it) and dropped when a reply leaves its context as made."""

    def __init__(self, nodes_mapping: dict[int, int], run: Any, app_dir: str | None) -> None:
        super().__init__()
        self._partitions = nodes_mapping
        self._num_partitions = len(set(nodes_mapping.values()))
        self._run, self._app_dir = run, app_dir
        self._lock = threading.Lock()

    def __missing__(self, node_id: int) -> DeprecatedRunInfoStore:
        with self._lock:
            if node_id in self:  # another worker thread made it meanwhile
                return dict.__getitem__(self, node_id)
            store = _TransientStore(self, node_id, {PARTITION_ID_KEY: self._partitions[node_id],
                                                    NUM_PARTITIONS_KEY: self._num_partitions})
            store.register_context(run_id=self._run.run_id, run=self._run, app_dir=self._app_dir)
            self[node_id] = store
            return store

    def release(self, node_id: int) -> None:
        with self._lock:
            self.pop(node_id, None)


class _TransientStore(DeprecatedRunInfoStore):
    """A node's store that asks its mapping to drop it when a reply leaves the context as it was made."""

    def __init__(self, owner: TransientNodeStores, node_id: int, node_config: dict[str, Any]) -> None:
        super().__init__(node_id=node_id, node_config=node_config)
        self._owner = owner

    def update_context(self, run_id: int, context: Context) -> None:
        super().update_context(run_id, context)  # Flower's own check of the run config, then the update
        if len(context.state) == 0 and context.node_config == self.node_config:
            self._owner.release(self.node_id)


def transient_node_info_stores(nodes_mapping: dict[int, int], run: Any,
                               app_dir: str | None = None) -> dict[int, DeprecatedRunInfoStore]:
    """`vce_api._register_node_info_stores` with the stores made on demand (`TransientNodeStores`)."""
    return TransientNodeStores(nodes_mapping, run, app_dir)


def register_simulation_nodes(num_nodes: int, state_factory: Any) -> dict[int, int]:
    """`vce_api._register_nodes`: the first node registered by Flower's own code, the others as ids
    sharing its `NodeInfo` (`SimulatedNodes`); node id -> partition id."""
    state = state_factory.state()
    if not isinstance(state, NodeIndexedLinkState) or num_nodes < 2:
        return _FLOWER_REGISTER_NODES(num_nodes=num_nodes, state_factory=state_factory)
    mapping = _FLOWER_REGISTER_NODES(num_nodes=1, state_factory=state_factory)
    (first,) = mapping
    shared = NodeInfo()
    with state.lock:
        shared.CopyFrom(state.nodes[first])
        shared.public_key = b""  # a simulation authenticates no node by its key
        ids = random_node_ids(num_nodes - 1, exclude={0, SUPERLINK_NODE_ID, *state.nodes})
        state.nodes.add_bulk(ids, shared)
    mapping.update(zip(ids.tolist(), range(1, num_nodes), strict=True))
    return mapping


_FLOWER_EXTRACTOR = vce_api.add_messages_to_queue
_FLOWER_REGISTER_NODES = vce_api._register_nodes
_FLOWER_NODE_STORES = vce_api._register_node_info_stores
_INSTALL_LOCK = threading.Lock()


def check_flower_internals() -> None:
    """Fail loudly if this Flower no longer has the functions this module replaces, as they were."""
    expected = ["state", "queue", "nodes_mapping", "f_stop"]
    if list(inspect.signature(_FLOWER_EXTRACTOR).parameters) != expected:
        raise RuntimeError("flwr's vce_api.add_messages_to_queue changed; testbed.federated.linkstate needs updating")
    source = inspect.getsource(_FLOWER_NODE_STORES)
    if list(inspect.signature(_FLOWER_NODE_STORES).parameters) != ["nodes_mapping", "run", "app_dir"] or \
            "register_context(" not in source or "PARTITION_ID_KEY" not in source:
        raise RuntimeError("flwr's vce_api._register_node_info_stores changed; "
                           "testbed.federated.linkstate needs updating")
    if linkstate_factory.InMemoryLinkState is not InMemoryLinkState and \
            linkstate_factory.InMemoryLinkState is not NodeIndexedLinkState:
        raise RuntimeError("flwr's LinkStateFactory no longer builds InMemoryLinkState")
    register = inspect.getsource(_FLOWER_REGISTER_NODES)
    if list(inspect.signature(_FLOWER_REGISTER_NODES).parameters) != ["num_nodes", "state_factory"] or \
            "create_node(" not in register or "acknowledge_node_heartbeat(" not in register:
        raise RuntimeError("flwr's vce_api._register_nodes changed; testbed.federated.linkstate needs updating")
    parameters = list(inspect.signature(InMemoryLinkState.get_message_ins).parameters)
    if parameters != ["self", "node_id", "limit", "run_id"]:
        raise RuntimeError("flwr's InMemoryLinkState.get_message_ins changed; "
                           "testbed.federated.linkstate needs updating")


@contextmanager
def indexed_simulation() -> Iterator[None]:
    """Flower's simulation engine with the node-indexed state and extractor, the nodes registered in
    bulk and the transient node stores, for the block's duration."""
    check_flower_internals()
    with _INSTALL_LOCK:
        linkstate_factory.InMemoryLinkState = NodeIndexedLinkState  # type: ignore[misc]  # swapped back below
        vce_api.add_messages_to_queue = add_pending_messages_to_queue
        vce_api._register_node_info_stores = transient_node_info_stores
        vce_api._register_nodes = register_simulation_nodes
    try:
        yield
    finally:
        with _INSTALL_LOCK:
            linkstate_factory.InMemoryLinkState = InMemoryLinkState  # type: ignore[misc]
            vce_api.add_messages_to_queue = _FLOWER_EXTRACTOR
            vce_api._register_node_info_stores = _FLOWER_NODE_STORES
            vce_api._register_nodes = _FLOWER_REGISTER_NODES
