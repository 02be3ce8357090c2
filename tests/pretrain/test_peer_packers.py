"""Tests for the benchmark's re-implementations of TRL's and LLaMA-Factory's packers (benchmarks/peer_packers.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from testbed.pretrain.bin_packing import best_fit_pack

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "peer_packers.py"
_SPEC = importlib.util.spec_from_file_location("peer_packers", _PATH)
assert _SPEC is not None and _SPEC.loader is not None  # a .py file path always has a spec with a loader
peer_packers = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(peer_packers)


def assert_valid_packing(bins: list[list[int]], lengths: np.ndarray, capacity: int) -> None:
    placed = sorted(i for b in bins for i in b)
    assert placed == list(range(len(lengths)))  # every chunk exactly once
    assert all(0 < sum(int(lengths[i]) for i in b) <= capacity for b in bins)


@pytest.mark.parametrize("seed", [0, 1])
def test_trl_style_bfd_uses_as_many_sequences_as_best_fit_over_one_batch(seed: int) -> None:
    capacity = 50
    lengths = np.random.default_rng(seed).integers(1, capacity + 1, size=800)
    whole = peer_packers.trl_style_bfd_split(lengths, capacity, batch_size=len(lengths))
    assert_valid_packing(whole, lengths, capacity)
    # Best fit's choice among bins with equal space never changes the spaces left, hence the bin count.
    assert len(whole) == len(best_fit_pack(lengths, capacity))


def test_trl_style_batches_are_packed_separately_and_cost_sequences() -> None:
    capacity = 100
    lengths = np.full(30, 40)  # two per sequence; a batch of 3 always leaves one sequence part empty
    batched = peer_packers.trl_style_bfd_split(lengths, capacity, batch_size=3)
    assert_valid_packing(batched, lengths, capacity)
    assert len(batched) == 20 and len(peer_packers.trl_style_bfd_split(lengths, capacity, batch_size=30)) == 15
    assert all(max(b) // 3 == min(b) // 3 for b in batched)  # no sequence mixes two batches


def test_llamafactory_style_knapsack_fills_each_sequence_with_the_largest_fitting_item() -> None:
    lengths = np.array([5, 1, 8, 3, 7, 2])
    knapsacks = peer_packers.llamafactory_style_greedy_knapsack(lengths, capacity=10)
    assert_valid_packing(knapsacks, lengths, 10)
    # 8 then the largest that fits in 2 is 2; next 7 then 3; then 5 and 1.
    assert [[int(lengths[i]) for i in k] for k in knapsacks] == [[8, 2], [7, 3], [5, 1]]
