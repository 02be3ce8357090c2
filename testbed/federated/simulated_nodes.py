"""The nodes of a simulated federation in arrays: Flower's node table without a `NodeInfo` per node.

Flower's SuperLink state keeps one `NodeInfo` protobuf per node (`InMemoryLinkState.nodes`) plus a
random 32-byte public key mapped back to it: about 1.6 KB a node in the driver, 1.6 GB at 10^6
clients, though the nodes of a simulation are alike. `vce_api._register_nodes` creates them all at
once, with the same owner, no authentication (the key is random bytes) and an infinite heartbeat
interval, so after registration they differ only in their id, and no simulation changes them again.

`SimulatedNodes` is the state's ``nodes`` mapping with those nodes held as one array of ids and one
shared `NodeInfo` (the first node's, made by Flower's own `create_node` and
`acknowledge_node_heartbeat`): a lookup makes a `NodeInfo` with the node's id. A node some state
method is about to change (`own`) gets a `NodeInfo` of its own first, which every later lookup
returns, so Flower's in-place updates behave as with Flower's dict; nodes created one by one
(`create_node`) are kept the same way. What is not kept per node is the random public key of the
nodes after the first: a simulation authenticates no node by key (`get_node_id_by_public_key` finds
only the first).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, MutableMapping

import numpy as np
from flwr.proto.node_pb2 import NodeInfo
from flwr.supercore.constant import NodeStatus

# Flower draws a node id as this many random bytes, an unsigned 64-bit integer (`create_node`).
ID_BYTES = 8


class SimulatedNodes(MutableMapping[int, NodeInfo]):
    """node id -> `NodeInfo`: nodes registered in bulk as an id array and one shared `NodeInfo`,
    the others (and bulk nodes a state method changed) as Flower keeps them."""

    def __init__(self) -> None:
        self._own: dict[int, NodeInfo] = {}
        self._ids = np.empty(0, np.uint64)  # bulk nodes, in registration order
        self._sorted = np.empty(0, np.uint64)
        self._shared = NodeInfo()
        self._own_outside_bulk = 0
        self._before_bulk: list[int] = []  # nodes created one by one before the bulk: listed first

    def add_bulk(self, ids: np.ndarray, shared: NodeInfo) -> None:
        """Register the nodes ``ids``, each like ``shared`` but for its id (once: a simulation's nodes
        after the first, which Flower registers itself)."""
        if len(self._ids):
            raise RuntimeError("a simulation registers its nodes in bulk once")
        self._ids, self._sorted = ids, np.sort(ids)
        self._before_bulk = list(self._own)
        self._shared.CopyFrom(shared)
        self._own_outside_bulk = sum(1 for node_id in self._own if not self._in_bulk(node_id))

    def own(self, node_id: int) -> None:
        """Give a bulk node a `NodeInfo` of its own, so that changes made to it are kept."""
        if node_id not in self._own and self._in_bulk(node_id):
            self._own[node_id] = self[node_id]

    def changeable(self, timestamp: float) -> list[int]:
        """The nodes Flower's offline check may change at ``timestamp``: those with a `NodeInfo` of
        their own, and the bulk ones too once their shared heartbeat deadline has passed."""
        shared = self._shared
        if len(self._ids) and shared.status == NodeStatus.ONLINE and shared.online_until <= timestamp:
            return list(self)
        return list(self._own)

    def with_status(self, status: str) -> set[int]:
        """The ids of the nodes whose status is ``status``."""
        ids = {node_id for node_id, node in self._own.items() if node.status == status}
        if len(self._ids) and self._shared.status == status:
            ids.update(node_id for node_id in self._ids.tolist() if node_id not in self._own)
        return ids

    def _in_bulk(self, node_id: object) -> bool:
        if not isinstance(node_id, int) or not 0 <= node_id < 2 ** (8 * ID_BYTES) or not len(self._sorted):
            return False
        at = int(np.searchsorted(self._sorted, np.uint64(node_id)))
        return at < len(self._sorted) and int(self._sorted[at]) == node_id

    def __getitem__(self, node_id: int) -> NodeInfo:
        node = self._own.get(node_id)
        if node is not None:
            return node
        if not self._in_bulk(node_id):
            raise KeyError(node_id)
        node = NodeInfo()
        node.CopyFrom(self._shared)
        node.node_id = node_id
        return node

    def __setitem__(self, node_id: int, node: NodeInfo) -> None:
        if node_id not in self._own and not self._in_bulk(node_id):
            self._own_outside_bulk += 1
        self._own[node_id] = node

    def __delitem__(self, node_id: int) -> None:
        if self._in_bulk(node_id):
            raise KeyError(f"node {node_id} was registered in bulk and stays")  # Flower never deletes one
        del self._own[node_id]
        self._own_outside_bulk -= 1

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._own or self._in_bulk(node_id)

    def __iter__(self) -> Iterator[int]:
        """In the order the nodes were registered, as Flower's dict lists them."""
        first = [node_id for node_id in self._before_bulk if node_id in self._own]
        yield from first
        yield from self._ids.tolist()
        earlier = set(first)
        yield from [node_id for node_id in self._own if node_id not in earlier and not self._in_bulk(node_id)]

    def __len__(self) -> int:
        return len(self._ids) + self._own_outside_bulk


def random_node_ids(count: int, exclude: set[int]) -> np.ndarray:
    """``count`` distinct random node ids as Flower draws one (`secrets`, 64 bits), none in ``exclude``."""
    ids = np.empty(0, np.uint64)
    while len(ids) < count:
        drawn = np.frombuffer(secrets.token_bytes(ID_BYTES * (count - len(ids))), dtype=np.uint64)
        ids = np.concatenate([ids, drawn[~np.isin(drawn, np.array(sorted(exclude), dtype=np.uint64))]])
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]  # a repeat (1 in 10^7 at 10^6 nodes) is drawn again
    return ids
