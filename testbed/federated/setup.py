"""Everything client and server derive from a federated scenario, identically in every process.

Built from the scenario and its root seed alone (never from Flower's random node ids), so a Ray
actor on any node, the driver and a resumed run all see the same partitions, the same malicious
clients and the same held-out data. Cached per process: Flower calls a client app once per
message, and rebuilding the split for every call would dominate a round.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from testbed.data import Dataset, label_histograms, load_selected, partition_indices, train_test_split
from testbed.data.config import DataConfig
from testbed.data.metadata import SplitMetadata, split_metadata
from testbed.data.partition import PartitionError
from testbed.data.streams import PARTITION, SPLIT
from testbed.scenario import Scenario
from testbed.seeding import SeedTree, stream
from testbed.workloads.registry import workload_class

if TYPE_CHECKING:  # the setup's checks import no torch (`check_federation_data`); the model does
    import torch

# The streams drawn from `FederationSetup.seeds`, declared here where the tree is handed out (the
# modules that draw them, named with each, take it from the setup). "{}" is a partition id or a round.
MODEL_INIT = stream("federated.model.init", "the initial global model")
ROOT_SET = stream("federated.root", "the server's clean root set (FLTrust), carved out before partitioning")
MALICIOUS = stream("federated.malicious", "which clients are Byzantine")
FAULTY = stream("federated.faulty", "which clients fail on purpose")
SAMPLING = stream("federated.sampling.round.{}", "the clients sampled for a round (sampling.py)")
CLIENT_ROUND = stream("client.{}/round.{}", "a client's local training in a round: batches, dropout (client.py)")
LABEL_FLIP = stream("attack.labels.{}", "a Byzantine client's flipped labels (client.py)")
BACKDOOR = stream("attack.backdoor.{}", "a backdoor client's poisoned samples (backdoor.py)")
ATTACK_ROUND = stream("attack.round.{}", "the server-side model-poisoning attack of a round (server.py)")
FLTRUST_ROUND = stream("fltrust.round.{}", "the server's training on its root set in a round (FLTrust)")
SDEA_PUBLIC = stream("sdea.public", "the synthetic public images SDEA distils on")
SDEA = stream("sdea", "SDEA's own random choices")
DNC = stream("dnc", "DnC's random coordinate subsets")


@dataclass(frozen=True, eq=False)
class Partitions:
    """Each client's training-row indices, as one array and the offsets where each client's begin.

    A tuple of one array per client costs about 115 bytes a client besides the indices: 115 MB at
    10^6 clients in the driver and again in every client actor. A client's rows are a view.
    """

    rows: np.ndarray  # int64, the clients' rows one client after another
    starts: np.ndarray  # int64, len(clients) + 1: client i's rows are rows[starts[i]:starts[i + 1]]

    @classmethod
    def of(cls, parts: Sequence[np.ndarray]) -> Partitions:
        starts = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(part) for part in parts], out=starts[1:])
        rows = np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, dtype=np.int64)
        return cls(rows, starts)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, client: int) -> np.ndarray:
        if not 0 <= client < len(self):
            raise IndexError(f"partition {client} of {len(self)}")
        return self.rows[self.starts[client]:self.starts[client + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[client] for client in range(len(self)))


@dataclass(frozen=True)
class FederationSetup:
    """Data, partitions and roles of a federated scenario."""

    scenario: Scenario
    train: Dataset
    test: Dataset
    root: Dataset | None  # the server's small clean set (FLTrust), carved out before partitioning
    partitions: Partitions
    malicious: frozenset[int]
    faulty: frozenset[int]  # clients that raise or hang (fault injection)
    seeds: SeedTree  # the run's seed tree, as this process rebuilds it (`federation_seeds`)

    @property
    def num_clients(self) -> int:
        return len(self.partitions)

    def client_data(self, partition_id: int) -> Dataset:
        """The training data of one client."""
        index = self.partitions[partition_id]
        return Dataset(self.train.name, self.train.x[index], self.train.y[index], self.train.num_classes,
                       self.train.image_shape)

    def build_model(self) -> torch.nn.Module:
        """The workload's model, initialised from the root seed (the round-0 global model)."""
        import torch

        from testbed.workloads.base import FederatedWorkload

        assert self.scenario.workload is not None  # check_federated requires a federated workload
        workload_cls = workload_class(self.scenario.workload.name)
        assert issubclass(workload_cls, FederatedWorkload)
        config = workload_cls.Config.model_validate(self.scenario.workload.params)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seeds.integer(MODEL_INIT.path))
            return workload_cls.model_for(config, self.train)

    def label_histograms(self) -> np.ndarray:
        return label_histograms(self.train.y, list(self.partitions), self.train.num_classes)


def federation_seeds(scenario: Scenario) -> SeedTree:
    """The run's seed tree, rebuilt from the scenario's root seed: Flower builds the client and server
    apps in processes (Ray actors) that get the scenario, never the driver's `RunContext`."""
    return SeedTree(scenario.seed, strict=True)


def federation_setup(scenario: Scenario, held_back: int | None = None) -> FederationSetup:
    """The (cached) setup of a scenario. ``held_back``: the training samples its strategy keeps for
    the server (`StrategyPlugin.server_samples`) as the process that built the client app read it, so
    that a worker partitions alike without the strategy's declaration (a plugin strategy may be
    installed on the driver only); None: read from the declaration here."""
    if held_back is None:
        from testbed.federated.strategies import server_samples  # the registry imports the setup's types

        assert scenario.federated is not None  # a federated scenario
        held_back = server_samples(scenario.federated.strategy)
    return _cached_setup(json.dumps(scenario.model_dump(mode="json"), sort_keys=True), held_back)


# The most memory the replicated training split (`data.replicate`) may take.
MAX_REPLICATED_BYTES = 4 << 30


@lru_cache(maxsize=2)
def _loaded(data_json: str) -> Dataset:
    """The dataset of a ``data:`` block, loaded once for the variants of a sweep that share it
    (validating 1,000 federated variants otherwise reloads it 1,000 times). Never written to: splits
    and partitions index it into new arrays."""
    return load_selected(DataConfig.model_validate(json.loads(data_json)))


@lru_cache(maxsize=4)
def _cached_setup(scenario_json: str, root_size: int) -> FederationSetup:
    scenario = Scenario.model_validate(json.loads(scenario_json))
    assert scenario.federated is not None  # a federated scenario: the runner fills in the block's defaults
    seeds = federation_seeds(scenario)
    train, test = train_test_split(_loaded(json.dumps(scenario.data.model_dump(mode="json"), sort_keys=True)),
                                   scenario.data.test_fraction, seeds.integer(SPLIT.path))
    clients, server = _training_rows(scenario, len(train.y), train.x.nbytes, root_size, seeds)
    root = train.subset(server) if server is not None else None
    if clients is not None:
        train = train.subset(clients)
    partitions = partition_indices(train.y, scenario.data.num_clients, scenario.data.partition,
                                   seeds.numpy(PARTITION.path), groups=train.groups)
    return FederationSetup(scenario, train, test, root, Partitions.of(partitions), malicious_clients(scenario, seeds),
                           faulty_clients(scenario, seeds), seeds)


def check_federation_data(scenario: Scenario, root_size: int) -> SplitMetadata:
    """What `federation_setup` does to the data, played on the training split's labels alone (cached
    metadata, `testbed.data.metadata`): the split, the replicas, the server's root set and the
    partition, with the same draws, so an impossible one raises the same `PartitionError` without
    loading the data, scikit-learn or torch. Returns the training split's metadata."""
    seeds = federation_seeds(scenario)
    split = split_metadata(scenario.data, scenario.data.test_fraction, seeds.integer(SPLIT.path))
    clients, _ = _training_rows(scenario, len(split.y), split.sample_bytes * len(split.y), root_size, seeds)
    y, groups = split.y, split.groups
    if clients is not None:
        y, groups = y[clients], groups[clients] if groups is not None else None
    partition_indices(y, scenario.data.num_clients, scenario.data.partition, seeds.numpy(PARTITION.path),
                      groups=groups)
    return split


def _training_rows(scenario: Scenario, samples: int, nbytes: int, root_size: int,
                   seeds: SeedTree) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Which rows of the training split (``samples`` rows of ``nbytes`` in all) the clients share, and
    which the server keeps (FLTrust's root set, else None): ``data.replicate`` copies, then the root
    set carved out. The clients' rows are None when they are all the rows, once each."""
    clients = None
    if scenario.data.replicate > 1:
        repeat = scenario.data.replicate
        if nbytes * repeat > MAX_REPLICATED_BYTES:
            raise PartitionError(f"data.replicate: {repeat} copies of the {samples} training samples would take "
                                 f"{nbytes * repeat / 2**30:.1f} GiB; at most "
                                 f"{MAX_REPLICATED_BYTES // 2**30} GiB are allowed")
        clients = np.tile(np.arange(samples), repeat)
    if not root_size:
        return clients, None
    # a strategy that trains on a server-held set (FLTrust's root set)
    rows = clients if clients is not None else np.arange(samples)
    rest, carved = _carve(len(rows), root_size, seeds.numpy(ROOT_SET.path))
    return rows[rest], rows[carved]


def malicious_clients(scenario: Scenario, seeds: SeedTree | None = None) -> frozenset[int]:
    """The Byzantine clients: ``round(fraction * N)`` partition ids drawn from the root seed."""
    assert scenario.federated is not None  # a federated scenario
    attack = scenario.federated.attack
    count = round(attack.fraction * scenario.data.num_clients) if attack else 0
    rng = (seeds if seeds is not None else federation_seeds(scenario)).numpy(MALICIOUS.path)
    return frozenset(int(i) for i in rng.choice(scenario.data.num_clients, size=count, replace=False))


def faulty_clients(scenario: Scenario, seeds: SeedTree | None = None) -> frozenset[int]:
    """Clients that fail on purpose (``federated.faults``), drawn from the root seed."""
    assert scenario.federated is not None  # a federated scenario
    faults = scenario.federated.faults
    count = max(1, round(faults.fraction * scenario.data.num_clients)) if faults else 0
    rng = (seeds if seeds is not None else federation_seeds(scenario)).numpy(FAULTY.path)
    return frozenset(int(i) for i in rng.choice(scenario.data.num_clients, size=count, replace=False))


def _carve(samples: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split ``size`` of ``samples`` rows off (the server's root set); returns the masks (rest, carved)."""
    chosen = np.zeros(samples, dtype=bool)
    chosen[rng.choice(samples, size=min(size, samples // 2), replace=False)] = True
    return ~chosen, chosen
