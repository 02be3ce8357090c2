"""What every process hosting nodes rebuilds from the scenario alone: graph, walk matrix, node data.

The driver, each Ray actor and each MPI rank call `build_problem` on the same scenario and get the
same graph, the same Metropolis-Hastings matrix and the same per-node data, because all of it is
derived from the root seed. Node data are padded to a common length with a mask, so a block of
nodes is one ``[b, m, F]`` tensor (`NodeData.block`).

Random numbers that must agree across engines are *keyed*, not streamed: the noise a node adds at
a step is drawn from a generator seeded by (root seed, stream, node, step) (`keyed_generator`), so
it does not depend on which process computes it or in which order. Each keyed stream is declared
(`testbed.seeding.stream`) like a tree's, so its name is used for one purpose only.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np

from testbed.data import load_selected, partition_indices, train_test_split
from testbed.data.streams import PARTITION, SPLIT
from testbed.decentralized.config import MAX_EDGES, MAX_NODES, DecentralizedConfig
from testbed.decentralized.graphs import registered_topologies
from testbed.seeding import SeedTree, Stream, stream
from testbed.topologies import graph_from_spec, metropolis_hastings

if TYPE_CHECKING:  # the graph, the walk and the checks import no torch (`testbed validate`); the node data do
    import torch

    from testbed.decentralized.models import FlatModel, ModelSpec


def keyed_generator(root: int, keyed: Stream, *keys: int) -> torch.Generator:
    """A torch Generator determined by (root, the stream's path, keys) alone (numpy SeedSequence hashing)."""
    import torch

    entropy = [int(root), zlib.crc32(keyed.path.encode()), *(int(k) for k in keys)]
    seed = int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] & 0x7FFF_FFFF_FFFF_FFFF)
    return torch.Generator().manual_seed(seed)


def noise(root: int, keyed: Stream, size: int, *keys: int) -> torch.Tensor:
    """Standard normal vector of ``size`` for the key (stream, keys)."""
    import torch

    return torch.randn(size, generator=keyed_generator(root, keyed, *keys))


BATCH = stream("batch", "a node's minibatch, keyed by (node, the node's step count)")
TOPOLOGY = stream("topology", "the random choices of a graph's builder (random regular, Erdos-Renyi, ...)")


def build_graph(config: DecentralizedConfig, seed: int, spec: dict | None = None) -> nx.Graph:
    """The topology (or ``spec``), random builders seeded from the root seed unless the spec has a seed;
    a graph beyond the supported size is refused before it is built. ``seed`` is the graph's own root:
    the run's, or a comparison trial's drawn from it (`testbed.decentralized.driver.comparison_arrays`)."""
    return graph_from_spec(spec or config.topology.spec, seed=SeedTree(seed, strict=True).integer(TOPOLOGY.path),
                           max_nodes=MAX_NODES, max_edges=MAX_EDGES, builders=registered_topologies())


def graph_seed(config: DecentralizedConfig, seed: int, spec: dict | None = None) -> int | None:
    """The root seed `build_graph`'s graph depends on: None where it depends on none (the spec sets its
    own ``seed``, or its builder is declared `testbed.topologies.graphs.seedless`), so that a sweep over
    seeds may reuse the graph of one."""
    spec = spec or config.topology.spec
    builder = registered_topologies().get(str(spec.get("name")))
    return None if "seed" in spec or getattr(builder, "seedless", False) else seed


@dataclass
class NodeData:
    """Training samples of nodes ``nodes``, padded: x [b, m, F], y [b, m], mask [b, m] (1 = real)."""

    nodes: np.ndarray
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor

    def block(self, nodes) -> NodeData:
        """The rows of the given global node ids."""
        rows = np.searchsorted(self.nodes, np.asarray(nodes))
        return NodeData(np.asarray(nodes), self.x[rows], self.y[rows], self.mask[rows])

    @property
    def counts(self) -> torch.Tensor:
        return self.mask.sum(dim=1)


@dataclass
class Problem:
    """The decentralized learning problem of a scenario (the same in every process)."""

    seed: int
    config: DecentralizedConfig
    graph: nx.Graph
    walk: np.ndarray  # Metropolis-Hastings W, dense float64
    spec: ModelSpec | None
    data: NodeData | None
    test_x: torch.Tensor | None
    test_y: torch.Tensor | None

    @property
    def n(self) -> int:
        return self.walk.shape[0]

    @property
    def model(self) -> FlatModel:
        from testbed.decentralized.models import FlatModel

        assert self.spec is not None  # a training problem (built with data)
        return FlatModel(self.spec)

    @property
    def dimension(self) -> int:
        """Length of a node's vector: the model, then one coordinate per audit canary."""
        assert self.spec is not None  # a training problem (built with data)
        return self.spec.num_params + self.config.audit.canaries

    def train_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All nodes' samples, unpadded (the global training loss is measured on them)."""
        assert self.data is not None  # a training problem (built with data)
        keep = self.data.mask.bool()
        return self.data.x[keep], self.data.y[keep]


def build_problem(scenario_data: dict, with_data: bool = True) -> Problem:
    """Rebuild the problem from a scenario dump (``Scenario.model_dump(mode="json")``); the driver,
    each Ray actor and each MPI rank rebuild the run's seed tree from its root seed with it."""
    from testbed.scenario import Scenario  # the schema imports this package's config

    scenario = Scenario.model_validate(scenario_data)
    config, seeds = scenario.decentralized, SeedTree(scenario.seed, strict=True)
    assert config is not None  # DecentralizedRunner.check requires the block
    graph = build_graph(config, scenario.seed)
    walk = metropolis_hastings(graph)
    if not (with_data and config.train):
        return Problem(scenario.seed, config, graph, walk, None, None, None, None)
    import torch

    from testbed.decentralized.models import ModelSpec

    full = load_selected(scenario.data)
    train, test = train_test_split(full, scenario.data.test_fraction, seeds.integer(SPLIT.path))
    parts = partition_indices(train.y, scenario.data.num_clients, scenario.data.partition,
                              seeds.numpy(PARTITION.path), groups=train.groups)
    features = train.num_features
    spec = ModelSpec(config.model.arch, features, full.num_classes, config.model.hidden)
    data = _pad(train.x.reshape(len(train.y), features), train.y, parts)
    test_x = torch.from_numpy(test.x.reshape(len(test.y), features))
    return Problem(scenario.seed, config, graph, walk, spec, data, test_x, torch.from_numpy(test.y))


def check_node_data(scenario) -> None:
    """What `build_problem` does to the data, played on the training split's labels alone (cached
    metadata, `testbed.data.metadata`): the split and the nodes' partition with the same draws, so an
    impossible one raises the same `PartitionError` without loading the data or torch."""
    from testbed.data.metadata import split_metadata

    seeds = SeedTree(scenario.seed, strict=True)
    split = split_metadata(scenario.data, scenario.data.test_fraction, seeds.integer(SPLIT.path))
    partition_indices(split.y, scenario.data.num_clients, scenario.data.partition, seeds.numpy(PARTITION.path),
                      groups=split.groups)


def _pad(x: np.ndarray, y: np.ndarray, parts: list[np.ndarray]) -> NodeData:
    """Stack each node's samples into [n, m_max, F] with a mask."""
    import torch

    width = max(len(part) for part in parts)
    xs = np.zeros((len(parts), width, x.shape[1]), dtype=np.float32)
    ys = np.zeros((len(parts), width), dtype=np.int64)
    mask = np.zeros((len(parts), width), dtype=np.float32)
    for node, part in enumerate(parts):
        xs[node, : len(part)], ys[node, : len(part)], mask[node, : len(part)] = x[part], y[part], 1.0
    return NodeData(np.arange(len(parts)), torch.from_numpy(xs), torch.from_numpy(ys), torch.from_numpy(mask))


def batch_mask(data: NodeData, batch_size: int | None, root: int, counters) -> torch.Tensor:
    """Which samples each node of ``data`` uses now: all of them, or ``batch_size`` drawn without
    replacement by a generator keyed by (node, counter) (a node's own step count)."""
    import torch

    if batch_size is None:
        return data.mask
    mask = torch.zeros_like(data.mask)
    for row, (node, counter) in enumerate(zip(data.nodes, counters)):
        count = int(data.mask[row].sum())
        chosen = torch.randperm(count, generator=keyed_generator(root, BATCH, node, counter))[:batch_size]
        mask[row, chosen] = 1.0
    return mask
