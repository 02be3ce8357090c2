"""Partitions of a labelled training set over federated clients (IID, Dirichlet, k classes, pathological, size skew)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from testbed.data import partition as partition_module
from testbed.data.partition import (
    DirichletPartition,
    IidPartition,
    PartitionConfig,
    PathologicalPartition,
    ShardPartition,
    SizePartition,
    label_histograms,
    partition_indices,
    size_skew_counts,
)
from testbed.errors import ScenarioError

CONFIGS = [IidPartition(), DirichletPartition(beta=0.3), ShardPartition(classes_per_client=2),
           PathologicalPartition(classes_per_client=2, assignment="deterministic"), SizePartition(sizes="linear")]


def balanced_labels(num_classes: int = 10, per_class: int = 60, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def mean_label_entropy(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> float:
    histogram = label_histograms(labels, parts, num_classes).astype(float)
    shares = histogram / histogram.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.nansum(np.where(shares > 0, shares * np.log(shares), 0.0), axis=1)
    return float(entropy.mean())


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.type)
def test_every_index_goes_to_exactly_one_client(config):
    labels = balanced_labels()

    parts = partition_indices(labels, 12, config, np.random.default_rng(1))

    assert len(parts) == 12
    assert all(part.dtype == np.int64 and np.all(np.diff(part) > 0) for part in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.type)
def test_same_seed_same_split_other_seed_other_split(config):
    labels = balanced_labels()

    first = partition_indices(labels, 8, config, np.random.default_rng(5))
    again = partition_indices(labels, 8, config, np.random.default_rng(5))
    other = partition_indices(labels, 8, config, np.random.default_rng(6))

    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_iid_sizes_differ_by_at_most_one():
    labels = balanced_labels(per_class=61)  # 610 samples over 7 clients does not divide evenly

    parts = partition_indices(labels, 7, IidPartition(), np.random.default_rng(0))

    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) == 1


@pytest.mark.parametrize("k", [1, 2, 3])
def test_shards_give_exactly_k_classes_and_use_classes_evenly(k):
    labels = balanced_labels()

    parts = partition_indices(labels, 15, ShardPartition(classes_per_client=k), np.random.default_rng(2))

    histogram = label_histograms(labels, parts, 10)
    assert all(len(np.unique(labels[part])) == k for part in parts)
    holders_per_class = (histogram > 0).sum(axis=0)
    assert holders_per_class.max() - holders_per_class.min() <= 1


def test_small_beta_is_much_more_skewed_than_large_beta():
    labels = balanced_labels(per_class=100)
    rng = np.random.default_rng(3)

    skewed = partition_indices(labels, 10, DirichletPartition(beta=0.1), rng)
    near_iid = partition_indices(labels, 10, DirichletPartition(beta=100.0), rng)
    iid = partition_indices(labels, 10, IidPartition(), rng)

    uniform = np.log(10)
    assert mean_label_entropy(labels, iid, 10) > 0.95 * uniform
    assert mean_label_entropy(labels, near_iid, 10) > 0.95 * uniform
    assert mean_label_entropy(labels, skewed, 10) < 0.6 * uniform


def test_dirichlet_respects_min_size():
    labels = balanced_labels()

    parts = partition_indices(labels, 20, DirichletPartition(beta=0.1, min_size=10), np.random.default_rng(4))

    assert min(len(part) for part in parts) >= 10


def test_dirichlet_gives_up_after_bounded_tries_naming_beta(monkeypatch):
    monkeypatch.setattr(partition_module, "MAX_DIRICHLET_TRIES", 3)
    labels = balanced_labels()  # 600 samples: min_size 60 for 10 clients needs an exactly even split

    with pytest.raises(ScenarioError, match=r"^data\.partition\.beta: .*3 draws"):
        partition_indices(labels, 10, DirichletPartition(beta=0.05, min_size=60), np.random.default_rng(0))


@pytest.mark.parametrize(("num_clients", "config", "field"), [
    (700, IidPartition(), "data.num_clients"),
    (10, DirichletPartition(min_size=61), "data.partition.min_size"),
    (10, ShardPartition(classes_per_client=11), "data.partition.classes_per_client"),
    (4, ShardPartition(classes_per_client=2), "data.partition.classes_per_client"),  # 8 < 10 classes
])
def test_impossible_requests_name_the_field(num_clients, config, field):
    labels = balanced_labels()

    with pytest.raises(ScenarioError) as caught:
        partition_indices(labels, num_clients, config, np.random.default_rng(0))

    message = str(caught.value)
    assert isinstance(caught.value, ValueError)  # callers may also treat it as a bad argument
    assert message.startswith(f"{field}: ") and "\n" not in message


def test_label_histograms_count_each_clients_labels():
    labels = np.array([0, 1, 1, 2, 2, 2])
    parts = [np.array([0, 3]), np.array([1, 2, 4, 5])]

    histogram = label_histograms(labels, parts, num_classes=4)

    assert histogram.dtype == np.int64
    assert histogram.tolist() == [[1, 0, 1, 0], [0, 2, 2, 0]]


def test_partition_config_is_a_discriminated_union_with_checked_fields():
    adapter = TypeAdapter(PartitionConfig)

    parsed = adapter.validate_python({"type": "dirichlet", "beta": 0.3})

    assert isinstance(parsed, DirichletPartition) and parsed.beta == 0.3 and parsed.min_size == 2
    assert isinstance(adapter.validate_python({"type": "shards"}), ShardPartition)
    assert isinstance(adapter.validate_python({"type": "size", "sizes": "square"}), SizePartition)
    for bad in ({"type": "dirichlet", "beta": 0}, {"type": "iid", "beta": 1}, {"type": "natural_id"},
                {"type": "size", "sizes": "cubic"}, {"type": "pathological", "assignment": "first-deterministic"}):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


# --- flwr-datasets' pathological and size-skew partitioners, from their definitions --------------------------


@pytest.mark.parametrize(("sizes", "num_samples", "num_clients", "expected"), [
    ("linear", 10, 4, [1, 2, 3, 4]),        # shares 1:2:3:4 of 10
    ("linear", 11, 4, [1, 2, 3, 5]),        # 1.1, 2.2, 3.3, 4.4 rounded down; the one left over to the last
    ("square", 14, 3, [1, 4, 9]),           # 1:4:9 of 14
    ("exponential", 100, 3, [9, 24, 67]),   # e/(e+e^2+e^3) = 0.0900, 0.2447, 0.6652 of 100; 99 + 1 to the last
])
def test_size_skew_counts_match_hand_computed_shares(sizes, num_samples, num_clients, expected):
    assert size_skew_counts(num_samples, num_clients, sizes).tolist() == expected


def test_size_partition_gives_those_counts_of_iid_samples():
    labels = balanced_labels()  # 600 samples

    parts = partition_indices(labels, 3, SizePartition(sizes="square"), np.random.default_rng(0))

    assert [len(part) for part in parts] == size_skew_counts(600, 3, "square").tolist() == [42, 171, 387]
    assert len(np.unique(labels[parts[2]])) == 10  # drawn IID: the largest client sees every class


def test_size_partition_refuses_a_client_without_samples():
    with pytest.raises(ScenarioError, match=r"^data\.partition\.sizes: exponential sizes over 10 clients"):
        partition_indices(balanced_labels(), 10, SizePartition(sizes="exponential"), np.random.default_rng(0))


def test_pathological_deterministic_assignment_is_classes_i_to_i_plus_k_minus_1():
    labels = np.repeat(np.arange(4), 4)  # classes 0..3, four samples each

    parts = partition_indices(labels, 4, PathologicalPartition(classes_per_client=2, assignment="deterministic"),
                              np.random.default_rng(0))

    # client i holds classes i and i+1 mod 4; each class has two holders, so two samples go to each
    assert [sorted(set(labels[part].tolist())) for part in parts] == [[0, 1], [1, 2], [2, 3], [0, 3]]
    assert [np.bincount(labels[part], minlength=4).tolist() for part in parts] == [
        [2, 2, 0, 0], [0, 2, 2, 0], [0, 0, 2, 2], [2, 0, 0, 2]]


@pytest.mark.parametrize("assignment", ["random", "first_deterministic"])
def test_pathological_gives_exactly_k_classes(assignment):
    labels = balanced_labels()

    parts = partition_indices(labels, 15, PathologicalPartition(classes_per_client=3, assignment=assignment),
                              np.random.default_rng(2))

    assert all(len(np.unique(labels[part])) == 3 for part in parts)
    if assignment == "first_deterministic":  # client i's first class is i mod 10
        assert all(client % 10 in labels[part] for client, part in enumerate(parts))
    used = np.concatenate(parts)
    assert len(np.unique(used)) == len(used)  # no sample twice; classes nobody holds are left out


def test_pathological_random_leaves_out_classes_nobody_holds():
    labels = balanced_labels()

    parts = partition_indices(labels, 2, PathologicalPartition(classes_per_client=1), np.random.default_rng(0))

    held = {int(c) for part in parts for c in np.unique(labels[part])}
    assert sum(len(part) for part in parts) == 60 * len(held) < len(labels)
