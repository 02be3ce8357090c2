"""Split a labelled training set over N federated clients, IID or non-IID.

Six schemes, each one `Partitioner` class: the typed config of the scenario's ``data.partition``
block, whose ``type`` literal is its name, and whose `Partitioner.split` returns one sorted int64
index array per client, deterministic for the numpy Generator passed in (the root seed's
``data.partition`` stream). `registered_partitioners` derives the registry from these classes and
the ``testbed.partitioners`` plugins; the `PartitionConfig` union is built from it:

- ``iid``: shuffle, then split as evenly as possible (sizes differ by at most one).
- ``dirichlet``: label-distribution skew of Hsu et al. 2019 ("Measuring the Effects of Non-Identical
  Data Distribution") as implemented in Li et al. 2022 ("Federated Learning on Non-IID Data Silos",
  NIID-Bench): per class, client proportions ~ Dir(beta); smaller beta is more skewed.
- ``shards``: every client holds exactly k classes (the "#C=k" scheme of Li et al. 2022, after the
  pathological split of McMahan et al. 2017); classes are dealt so each is used as evenly as possible.
- ``pathological``: every client holds exactly k classes chosen as flwr-datasets'
  ``PathologicalPartitioner`` chooses them (random, deterministic ``(i + j) mod C``, or the first
  deterministic and the rest random); a class's samples are split evenly among its holders, and a
  class nobody holds is left out, as there.
- ``size``: quantity skew, as flwr-datasets' Linear, Square and Exponential partitioners: client i
  (from 0) gets a share proportional to f(i + 1) with f(x) = x, x^2 or e^x, rounded down, the
  remainder to the last client; the samples themselves are drawn IID.
- ``natural``: one client per owner of the data (FEMNIST writers, a table's group column), as
  flwr-datasets' ``NaturalIdPartitioner``; no randomness.

flwr-datasets itself is not a dependency: its partitioners need a Hugging Face ``datasets.Dataset``,
and flwr-datasets 0.6 pins ``datasets < 5``, which would downgrade ``huggingface_hub`` and ``fsspec``
under the rest of the project, for what is index arithmetic on a label array. The two schemes are
written here from its documented definitions and checked against hand-computed splits.

Usage::

    parts = partition_indices(train.y, 20, DirichletPartition(beta=0.3), seeds.numpy("data.partition"))
    histogram = label_histograms(train.y, parts, train.num_classes)  # [20, C], for the report
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

import numpy as np
from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError
from testbed.plugins import declare, literal_name

# Redraws of the Dirichlet split before giving up; each is cheap (one draw per class), and with a
# feasible min_size a few dozen tries are usually enough even for beta = 0.05.
MAX_DIRICHLET_TRIES = 1000


class PartitionError(ScenarioError, ValueError):
    """A partition the data cannot satisfy: a `ScenarioError` (one line, CLI exit 2) that is also a
    ValueError for callers that treat it as a bad argument."""


class Partitioner(StrictModel, ABC):
    """A partition scheme: its settings (the ``data.partition`` block) and how it splits."""

    type: str
    name: ClassVar[str] = ""  # the value of the ``type`` literal, read from the class (never repeated)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.name = literal_name(cls)

    @abstractmethod
    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        """One sorted int64 index array per client (``groups``: each sample's owner, or None)."""


class IidPartition(Partitioner):
    """Every client gets a uniformly random, equally sized share of the training set."""

    type: Literal["iid"] = "iid"

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_iid(labels, num_clients, rng)


class DirichletPartition(Partitioner):
    """Label skew: per class, client shares ~ Dir(beta) (Hsu et al. 2019; Li et al. 2022)."""

    type: Literal["dirichlet"] = "dirichlet"
    beta: float = Field(0.5, gt=0, description="concentration; 0.1 is very skewed, 100 is near IID")
    min_size: int = Field(2, ge=1, description="redraw until every client has this many samples")

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_dirichlet(labels, num_clients, rng, self.beta, self.min_size)


class ShardPartition(Partitioner):
    """Every client holds samples of exactly ``classes_per_client`` classes (Li et al. 2022, #C=k)."""

    type: Literal["shards"] = "shards"
    classes_per_client: int = Field(2, gt=0)

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_shards(labels, num_clients, rng, self.classes_per_client)


class PathologicalPartition(Partitioner):
    """Every client holds exactly ``classes_per_client`` classes, assigned as flwr-datasets'
    PathologicalPartitioner's ``class_assignment_mode`` (McMahan et al. 2017)."""

    type: Literal["pathological"] = "pathological"
    classes_per_client: int = Field(2, gt=0)
    assignment: Literal["random", "deterministic", "first_deterministic"] = Field(
        "random", description="random: k classes per client uniformly; deterministic: classes i..i+k-1 mod C; "
                              "first_deterministic: class i mod C, then k-1 random ones")

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_pathological(labels, num_clients, rng, self.classes_per_client, self.assignment)


class SizePartition(Partitioner):
    """Quantity skew: IID samples, client i's share proportional to f(i + 1) (flwr-datasets' Linear,
    Square and Exponential partitioners)."""

    type: Literal["size"] = "size"
    sizes: Literal["linear", "square", "exponential"] = Field("linear", description="f(x) = x, x^2 or e^x")

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_size(labels, num_clients, rng, self.sizes)


class NaturalPartition(Partitioner):
    """One client per owner of the data, as flwr-datasets' NaturalIdPartitioner: a FEMNIST writer,
    the value of a table's group column; ``data.num_clients`` must equal the number of owners."""

    type: Literal["natural"] = "natural"
    column: str | None = Field(None, description="the column naming each sample's owner (tables, Hugging Face "
                                                 "datasets); default: the source's own owner")

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator,
              groups: np.ndarray | None) -> list[np.ndarray]:
        return partition_natural(labels, num_clients, groups)


@cache
def registered_partitioners() -> dict[str, type[Partitioner]]:
    """Every partition scheme by name: the built-in classes above, then ``testbed.partitioners`` plugins."""
    return declare("testbed.partitioners", (IidPartition, DirichletPartition, ShardPartition, PathologicalPartition,
                                            SizePartition, NaturalPartition), Partitioner)


if TYPE_CHECKING:
    PartitionConfig = Partitioner
else:
    def __getattr__(name: str) -> Any:
        # Built on first use, not on import: a plugin's module imports this one to subclass Partitioner.
        if name == "PartitionConfig":
            return _partition_union()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def _partition_union() -> Any:
    return Annotated[Union[tuple(registered_partitioners().values())], Field(discriminator="type")]


def _check_inputs(labels: np.ndarray, num_clients: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got shape {labels.shape} dtype {labels.dtype}")
    if num_clients < 1:
        raise PartitionError(f"data.num_clients: must be at least 1, got {num_clients}")
    if num_clients > len(labels):
        raise PartitionError(
            f"data.num_clients: {num_clients} clients but only {len(labels)} training samples; "
            "use fewer clients or a larger dataset"
        )
    return labels


def _sorted_int64(parts: Sequence[np.ndarray | list]) -> list[np.ndarray]:
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in parts]


def partition_iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle all indices and split them into ``num_clients`` near-equal parts."""
    labels = _check_inputs(labels, num_clients)
    return _sorted_int64(np.array_split(rng.permutation(len(labels)), num_clients))


def _dirichlet_draw(labels: np.ndarray, num_clients: int, beta: float, rng: np.random.Generator) -> list[list]:
    """One draw of the NIID-Bench scheme; may leave some client below the minimum size."""
    parts: list[list] = [[] for _ in range(num_clients)]
    target_size = len(labels) / num_clients
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        shares = rng.dirichlet(np.full(num_clients, beta))
        # NIID-Bench's balancing step: a client already above the average size takes no more, so
        # the skew stays in the labels rather than turning into a few giant clients.
        open_clients = np.array([len(part) < target_size for part in parts])
        if (shares * open_clients).sum() > 0:
            shares = shares * open_clients
        shares = shares / shares.sum()
        cuts = (np.cumsum(shares) * len(members)).astype(int)[:-1]
        for part, chunk in zip(parts, np.split(members, cuts)):
            part.extend(chunk.tolist())
    return parts


def partition_dirichlet(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                        beta: float = 0.5, min_size: int = 2) -> list[np.ndarray]:
    """Label-skewed split with per-class client shares ~ Dir(beta), redrawn until every client
    has at least ``min_size`` samples (Li et al. 2022, NIID-Bench)."""
    labels = _check_inputs(labels, num_clients)
    if beta <= 0:
        raise PartitionError(f"data.partition.beta: must be > 0, got {beta}")
    if min_size * num_clients > len(labels):
        raise PartitionError(
            f"data.partition.min_size: {min_size} samples for each of {num_clients} clients needs "
            f"{min_size * num_clients}, but the training set has {len(labels)}"
        )
    for _ in range(MAX_DIRICHLET_TRIES):
        parts = _dirichlet_draw(labels, num_clients, beta, rng)
        if min(len(part) for part in parts) >= min_size:
            return _sorted_int64(parts)
    raise PartitionError(
        f"data.partition.beta: no split with at least min_size={min_size} samples per client in "
        f"{MAX_DIRICHLET_TRIES} draws with beta={beta}; raise beta or lower min_size or num_clients"
    )


def _deal_classes(classes: np.ndarray, num_clients: int, per_client: int,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Give each client ``per_client`` distinct classes, always picking the least-used ones
    (random tie-break), so class usage counts never differ by more than one."""
    uses = np.zeros(len(classes), dtype=np.int64)
    dealt = []
    for _ in range(num_clients):
        order = np.lexsort((rng.random(len(classes)), uses))  # by uses, then randomly
        chosen = order[:per_client]
        uses[chosen] += 1
        dealt.append(classes[chosen])
    return dealt


def partition_shards(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                     classes_per_client: int = 2) -> list[np.ndarray]:
    """Each client gets samples of exactly ``classes_per_client`` classes; a class's samples are
    shuffled and split evenly among the clients that hold it, so every sample is used once."""
    labels = _check_inputs(labels, num_clients)
    classes = np.unique(labels)
    field = "data.partition.classes_per_client"
    if classes_per_client > len(classes):
        raise PartitionError(f"{field}: {classes_per_client} is more than the {len(classes)} classes in the data")
    if classes_per_client * num_clients < len(classes):
        raise PartitionError(
            f"{field}: {num_clients} clients x {classes_per_client} classes cannot cover all "
            f"{len(classes)} classes; raise classes_per_client or num_clients"
        )
    dealt = _deal_classes(classes, num_clients, classes_per_client, rng)
    parts: list[list] = [[] for _ in range(num_clients)]
    for label in classes:
        holders = [client for client, held in enumerate(dealt) if label in held]
        members = rng.permutation(np.flatnonzero(labels == label))
        if len(members) < len(holders):
            raise PartitionError(
                f"{field}: class {label} has {len(members)} samples but is dealt to {len(holders)} "
                "clients; use fewer clients or fewer classes per client"
            )
        for client, chunk in zip(holders, np.array_split(members, len(holders))):
            parts[client].extend(chunk.tolist())
    return _sorted_int64(parts)


def _pathological_classes(classes: np.ndarray, num_clients: int, per_client: int, assignment: str,
                          rng: np.random.Generator) -> list[list[int]]:
    """The classes each client holds, by flwr-datasets' three assignment modes."""
    num_classes = len(classes)
    held: list[list[int]] = []
    for client in range(num_clients):
        if assignment == "deterministic":
            held.append([int(classes[(client + j) % num_classes]) for j in range(per_client)])
        elif assignment == "random":
            held.append([int(c) for c in rng.choice(classes, size=per_client, replace=False)])
        else:  # first_deterministic
            first = int(classes[client % num_classes])
            rest = rng.choice(classes[classes != first], size=per_client - 1, replace=False)
            held.append([first, *(int(c) for c in rest)])
    return held


def partition_pathological(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                           classes_per_client: int = 2, assignment: str = "random") -> list[np.ndarray]:
    """Each client gets samples of exactly ``classes_per_client`` classes, assigned by ``assignment``;
    a class's samples are shuffled and split evenly among the clients that hold it."""
    labels = _check_inputs(labels, num_clients)
    classes = np.unique(labels)
    field = "data.partition.classes_per_client"
    if classes_per_client > len(classes):
        raise PartitionError(f"{field}: {classes_per_client} is more than the {len(classes)} classes in the data")
    held = _pathological_classes(classes, num_clients, classes_per_client, assignment, rng)
    parts: list[list] = [[] for _ in range(num_clients)]
    for label in classes:
        holders = [client for client, chosen in enumerate(held) if label in chosen]
        members = rng.permutation(np.flatnonzero(labels == label))
        if holders and len(members) < len(holders):
            raise PartitionError(f"{field}: class {label} has {len(members)} samples but {len(holders)} clients "
                                 "hold it; use fewer clients or fewer classes per client")
        for client, chunk in zip(holders, np.array_split(members, max(len(holders), 1))):
            parts[client].extend(chunk.tolist())
    return _sorted_int64(parts)


# Each client's relative size f(i), up to a common factor: the exponential's is e^(i - N), the same
# shares as e^i without its overflow past 709 clients (the first clients' shares then underflow to
# zero, and `partition_size` refuses them in one line).
SIZE_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda x: x, "square": np.square, "exponential": lambda x: np.exp(x - x[-1]),
}


def size_skew_counts(num_samples: int, num_clients: int, sizes: str) -> np.ndarray:
    """Samples per client: shares f(1..N) / sum, rounded down, the remainder to the last client."""
    units = SIZE_FUNCTIONS[sizes](np.arange(1, num_clients + 1, dtype=np.float64))
    counts = (units / units.sum() * num_samples).astype(np.int64)
    counts[-1] += num_samples - counts.sum()
    return counts


def partition_size(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                   sizes: str = "linear") -> list[np.ndarray]:
    """IID samples in quantity-skewed shares (`size_skew_counts`)."""
    labels = _check_inputs(labels, num_clients)
    counts = size_skew_counts(len(labels), num_clients, sizes)
    if counts.min() < 1:
        raise PartitionError(f"data.partition.sizes: {sizes} sizes over {num_clients} clients leave client 0 no "
                             f"sample of the {len(labels)}; use fewer clients or a flatter size function")
    return _sorted_int64(np.split(rng.permutation(len(labels)), np.cumsum(counts)[:-1]))


def partition_natural(labels: np.ndarray, num_clients: int, groups: np.ndarray | None) -> list[np.ndarray]:
    """Client i holds the samples of owner i (owners are numbered 0..K-1 by the data source)."""
    labels = _check_inputs(labels, num_clients)
    if groups is None:
        raise PartitionError("data.partition.type: 'natural' needs owners: a FEMNIST folder, or a table or "
                             "Hugging Face dataset with data.group or data.partition.column")
    owners = np.unique(groups)
    if len(owners) != num_clients:
        raise PartitionError(f"data.num_clients: {num_clients} clients but the training split has {len(owners)} "
                             f"owners; set data.num_clients: {len(owners)} for a natural partition")
    # Renumbered in order: an owner whose samples all fell into the test split leaves no gap.
    return _sorted_int64([np.flatnonzero(groups == owner) for owner in owners])


def partition_indices(labels: np.ndarray, num_clients: int, config: PartitionConfig,
                      rng: np.random.Generator, groups: np.ndarray | None = None) -> list[np.ndarray]:
    """Split sample indices over ``num_clients`` clients by the scheme ``config`` names (``groups``:
    each sample's owner, which only ``natural`` reads)."""
    return config.split(labels, num_clients, rng, groups)


def label_histograms(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """Per-client label counts, an int64 array [num_clients, num_classes] (the report's heatmap)."""
    labels = np.asarray(labels)
    histogram = np.zeros((len(parts), num_classes), dtype=np.int64)
    for client, part in enumerate(parts):
        counts = np.bincount(labels[part], minlength=num_classes)
        if len(counts) > num_classes:
            raise ValueError(f"label {len(counts) - 1} is outside num_classes={num_classes}")
        histogram[client] = counts
    return histogram
