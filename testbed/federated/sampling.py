"""Client sampling (``federated.sampling``): which clients train in each round.

The sample of round R is drawn by *partition id* from the root seed's stream
``federated.sampling.round.R`` (declared in `testbed.federated.setup`), so a seed samples the same clients in
every round on every engine and again in a resumed run. Flower's own ``fraction_train`` cannot do
that: it samples node ids, which are random per run, with ``random.sample``.

The round loop (`testbed.federated.server`) learns once per run which Flower node hosts which
partition (`QUERY_PARTITION`: every client answers a query message with its partition id), then hands
the strategy a `SampledGrid` whose node ids are the round's sample only. Any strategy's
``configure_train`` (Flower's, the robust ones, a wrapper around either) then addresses exactly the
sampled clients with its ``fraction_train = 1``, and only they train::

    sample = sample_clients(sampling, 20, setup.seeds, server_round=3)   # e.g. [1, 4, 9, 12, 17]
    messages = strategy.configure_train(3, arrays, config, SampledGrid(grid, [nodes[p] for p in sample]))
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from testbed.federated.config import SamplingConfig
from testbed.seeding import SeedTree

QUERY_PARTITION = "partition-id"  # the query reply's metric naming the client's partition


def clients_per_round(sampling: SamplingConfig | None, num_clients: int) -> int:
    """How many clients every round trains: all without ``sampling``."""
    return num_clients if sampling is None else sampling.per_round(num_clients)


def sample_clients(sampling: SamplingConfig | None, num_clients: int, seeds: SeedTree,
                   server_round: int) -> list[int]:
    """The partition ids that train in ``server_round``, sorted; every client without ``sampling``."""
    if sampling is None:
        return list(range(num_clients))
    rng = seeds.numpy(f"federated.sampling.round.{server_round}")
    chosen = rng.choice(num_clients, size=sampling.per_round(num_clients), replace=False)
    return sorted(int(i) for i in chosen)


class SampledGrid(Grid):
    """A view of a Flower `Grid` that shows a strategy only the round's sampled nodes; messages go
    through the grid it wraps."""

    def __init__(self, grid: Grid, node_ids: Iterable[int]):
        self.grid = grid
        self.node_ids = list(node_ids)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.grid.send_and_receive(messages, timeout=timeout)
