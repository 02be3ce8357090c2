"""Tests for the first-neighbour clustering (FINCH) used by SDEA."""

import numpy as np
import pytest

from testbed.strategies.finch import finch, merge_to


def test_first_partition_separates_two_groups():
    # Prepare
    values = np.array([0.20, 0.21, 0.22, 0.05, 0.06, 0.07])
    # Execute
    partitions = finch(values)
    # Assert
    first = partitions[0]
    assert len(set(first[:3])) == 1 and len(set(first[3:])) == 1
    assert first[0] != first[3]


def test_hierarchy_gets_coarser_and_stops_before_one_cluster():
    values = np.array([0.0, 0.1, 1.0, 1.1, 5.0, 5.1, 6.0, 6.1])
    partitions = finch(values)
    counts = [p.max() + 1 for p in partitions]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] == 4 and counts[-1] == 2


def test_two_points_or_one_chain_give_no_partition():
    assert finch(np.array([0.1, 0.2])) == []
    # Each point's nearest neighbour chains all three together.
    assert finch(np.array([0.0, 1.0, 2.1])) == []


def test_merge_to_joins_closest_means():
    values = np.array([0.0, 0.1, 1.0, 1.1, 5.0])
    labels = np.array([0, 0, 1, 1, 2])
    merged = merge_to(values, labels, 2)
    assert merged.tolist() == [0, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="k"):
        merge_to(values, labels, 0)
