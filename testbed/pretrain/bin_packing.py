"""Bin-packing algorithms over integer item lengths: Best-Fit Decreasing and its references.

Items are chunk lengths in [1, capacity]; bins are training sequences of `capacity` tokens.
Every function returns a list of bins, each a list of item indices in placement order, with
bins numbered in the order they were opened.

Shared ordering and tie-breaking rule (so that all implementations agree exactly):
  1. items are taken by decreasing length; equal lengths keep input order (lower index first);
  2. best fit: the bin with the smallest remaining capacity that still holds the item;
     among bins with equal remaining capacity, the lowest bin id (the oldest bin);
  3. if no open bin holds the item, a new bin is opened with the next id.

`best_fit_pack` is the Optimized BFD of Ding et al. (ICML 2024, section 3.1): counting sort plus
a segment tree over capacities, O(N log L). `reference_best_fit_pack` is the textbook O(N * bins)
scan, kept for tests. `first_fit_decreasing_pack` is plain FFD (first open bin that fits) for the
benchmark; it uses a max-tree over bin ids so that it runs in O(N log N) rather than O(N * bins).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from testbed.pretrain.segment_tree import BinsByCapacity, MaxSegmentTree

Bins = list[list[int]]


def as_item_lengths(lengths: Sequence[int] | np.ndarray, capacity: int) -> np.ndarray:
    """Return `lengths` as an int64 array, checking that every item fits in one bin."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    items = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if items.size and (items.min() < 1 or items.max() > capacity):
        raise ValueError(f"item lengths must lie in [1, {capacity}]; chunk longer documents first")
    return items


def decreasing_order(items: np.ndarray, capacity: int) -> np.ndarray:
    """Indices of `items` by decreasing length, ties by increasing index (rule 1).

    The sort key `capacity - length` lies in [0, capacity); for capacity <= 65535 it fits in
    uint16, where numpy's stable sort is a radix sort: the paper's O(N + L) counting sort.
    """
    key = capacity - items
    if capacity <= np.iinfo(np.uint16).max:
        key = key.astype(np.uint16)
    return np.argsort(key, kind="stable")


def best_fit_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> Bins:
    """Best-Fit Decreasing with a segment tree over remaining capacities, O(N log L).

    Implements Algorithm 1 of Ding et al. (2024) in its optimized form. Item lengths must be in
    [1, capacity] (use `split_into_chunks` first for longer documents).
    """
    items = as_item_lengths(lengths, capacity)
    open_bins = BinsByCapacity(capacity)
    find_capacity = open_bins.smallest_fitting_capacity
    pop_bin = open_bins.pop_bin
    push_bin = open_bins.push_bin
    bins: Bins = []
    for item, length in zip(*_decreasing_items(items, capacity)):
        remaining = find_capacity(length)
        if remaining < 0:
            bin_id = len(bins)
            bins.append([item])
            remaining = capacity
        else:
            bin_id = pop_bin(remaining)
            bins[bin_id].append(item)
        push_bin(bin_id, remaining - length)
    return bins


def reference_best_fit_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> Bins:
    """Textbook Best-Fit Decreasing: scan all open bins for each item, O(N * bins).

    Written to be obviously correct, not fast; the tests compare `best_fit_pack` against it.
    """
    items = as_item_lengths(lengths, capacity)
    remaining = np.zeros(items.size, dtype=np.int64)
    no_fit = capacity + 1
    bins: Bins = []
    for item in decreasing_order(items, capacity).tolist():
        length = int(items[item])
        open_remaining = remaining[: len(bins)]
        slack = np.where(open_remaining >= length, open_remaining, no_fit)
        # argmin returns the first minimum, i.e. the lowest bin id among equal capacities.
        bin_id = int(slack.argmin()) if bins else -1
        if bin_id < 0 or slack[bin_id] == no_fit:
            bin_id = len(bins)
            bins.append([])
            remaining[bin_id] = capacity
        bins[bin_id].append(item)
        remaining[bin_id] -= length
    return bins


def first_fit_decreasing_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> Bins:
    """First-Fit Decreasing: each item goes to the lowest-id bin that still holds it.

    The search uses a max-tree over bin ids (leaf = remaining capacity; unopened bins count as
    empty, so the first unopened bin is where a new bin opens), O(N log N) in total.
    """
    items = as_item_lengths(lengths, capacity)
    remaining = MaxSegmentTree(items.size, fill=capacity)  # leaf = remaining capacity of that bin id
    first_fitting_bin = remaining.leftmost_at_least
    set_remaining = remaining.set
    bins: Bins = []
    for item, length in zip(*_decreasing_items(items, capacity)):
        bin_id = first_fitting_bin(length)
        if bin_id == len(bins):
            bins.append([])
        bins[bin_id].append(item)
        set_remaining(bin_id, remaining[bin_id] - length)
    return bins


def _decreasing_items(items: np.ndarray, capacity: int) -> tuple[list[int], list[int]]:
    order = decreasing_order(items, capacity)
    return order.tolist(), items[order].tolist()
