"""Bin-packing algorithms over integer item lengths: Best-Fit Decreasing and its references.

Items are chunk lengths in [1, capacity]; bins are training sequences of `capacity` tokens.
Every function returns a list of bins, each a list of item indices in placement order, with
bins numbered in the order they were opened (`best_fit_pack_arrays` returns the same bins as two
flat arrays).

Shared ordering and tie-breaking rule (so that all implementations agree exactly):
  1. items are taken by decreasing length; equal lengths keep input order (lower index first);
  2. best fit: the bin with the smallest remaining capacity that still holds the item;
     among bins with equal remaining capacity, the lowest bin id (the oldest bin);
  3. if no open bin holds the item, a new bin is opened with the next id.

`best_fit_pack` (and `best_fit_pack_arrays`) is Best-Fit Decreasing processed one item length at
a time, in numpy: see `grouped_best_fit_pack` for why a whole group of equal items can be placed
at once, exactly as the item-by-item rule would. `segment_tree_best_fit_pack` is the Optimized BFD
of Ding et al. (ICML 2024, section 3.1) item by item (counting sort plus a segment tree over
capacities, O(N log L)), the previous implementation, kept for the benchmark and the tests.
`reference_best_fit_pack` is the textbook O(N * bins) scan, kept for tests.
`first_fit_decreasing_pack` is plain FFD (first open bin that fits) for the benchmark; it uses a
max-tree over bin ids so that it runs in O(N log N) rather than O(N * bins).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from testbed.pretrain.segment_tree import BinsByCapacity, MaxSegmentTree

Bins = list[list[int]]
# best_fit_pack_arrays places items one by one below this many items per distinct length
# (measured crossover of the two paths: about 10 items per length at L = 2048).
ITEMS_PER_LENGTH_FOR_GROUPS = 12


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


class PackedBins(NamedTuple):
    """Bins as two flat arrays: bin b holds the items ``items[offsets[b]:offsets[b + 1]]``, in placement order."""

    items: np.ndarray
    offsets: np.ndarray

    @property
    def n_bins(self) -> int:
        """Number of bins."""
        return self.offsets.size - 1

    @classmethod
    def from_lists(cls, bins: Bins) -> PackedBins:
        """The flat-array form of bins given as lists of item indices."""
        sizes = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(np.fromiter((item for b in bins for item in b), dtype=np.int64, count=int(offsets[-1])), offsets)

    def as_lists(self) -> Bins:
        """The same bins as lists of item indices."""
        flat, bounds = self.items.tolist(), self.offsets.tolist()
        return [flat[low:high] for low, high in zip(bounds[:-1], bounds[1:])]


def best_fit_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> Bins:
    """Best-Fit Decreasing (rules 1-3 above), one item length at a time; see `grouped_best_fit_pack`."""
    return best_fit_pack_arrays(lengths, capacity).as_lists()


def best_fit_pack_arrays(lengths: Sequence[int] | np.ndarray, capacity: int) -> PackedBins:
    """Best-Fit Decreasing as flat arrays: `grouped_best_fit_pack`, or item by item when that is faster.

    With fewer than ITEMS_PER_LENGTH_FOR_GROUPS items per distinct length, a group step (a dozen
    numpy calls) costs more than placing its items one by one; both paths give the same bins.
    """
    items = as_item_lengths(lengths, capacity)
    if items.size < ITEMS_PER_LENGTH_FOR_GROUPS * np.count_nonzero(np.bincount(items)):
        return PackedBins.from_lists(segment_tree_best_fit_pack(items, capacity))
    return grouped_best_fit_pack(items, capacity)


def grouped_best_fit_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> PackedBins:
    """Best-Fit Decreasing placing all items of one length together, with numpy arrays of bin ids.

    Why a whole group of equal items (length w) can be placed at once with the item-by-item rule:
    take the tightest open bin that holds w, with c free slots. After one item it has c - w left,
    tighter than every other bin that holds w, so while c - w >= w it also takes the next item.
    It therefore takes floor(c / w) items in a row (fewer if the group runs out) and ends with
    c mod w < w, out of the group's reach. Then comes the next tightest bin, bins with equal space
    lowest id first, and after the last fitting bin new bins (space L) taking floor(L / w) items
    each. So the group is placed one distinct free space at a time, an array of bin ids per
    space; the Python loop runs about (distinct lengths + spaces visited) times, not N times,
    and the bins are exactly those of `segment_tree_best_fit_pack`.
    """
    items = as_item_lengths(lengths, capacity)
    group_sizes = np.bincount(items, minlength=capacity + 1)
    open_bins = _OpenBins(capacity)
    placements = _Placements(items.size)
    for width in np.flatnonzero(group_sizes)[::-1].tolist():  # rule 1: longest first
        _place_group(width, int(group_sizes[width]), open_bins, placements)
    return placements.packed_bins(decreasing_order(items, capacity))


def _place_group(width: int, n_items: int, open_bins: _OpenBins, placements: _Placements) -> None:
    # Rule 2 for every item of this length: tightest spaces first, then new bins (rule 3).
    for space in open_bins.spaces_at_least(width):
        n_items -= _fill_bins(open_bins.take(space, _bins_needed(n_items, space, width)), space, width, n_items,
                              open_bins, placements)
        if not n_items:
            return
    capacity = open_bins.capacity
    new_bins = placements.open_bins(_bins_needed(n_items, capacity, width))
    _fill_bins(new_bins, capacity, width, n_items, open_bins, placements)


def _bins_needed(n_items: int, space: int, width: int) -> int:
    return -(-n_items // (space // width))


def _fill_bins(
    bin_ids: np.ndarray, space: int, width: int, n_items: int, open_bins: _OpenBins, placements: _Placements
) -> int:
    # Bins `bin_ids` (ascending, all with `space` free) take floor(space / width) items each, the
    # last one possibly fewer; each then waits at its new free space. Returns the items placed.
    per_bin = space // width
    n_full = min(bin_ids.size, n_items // per_bin)
    full = bin_ids[:n_full]
    placements.place(full, per_bin)
    open_bins.add(full, space - per_bin * width)
    placed = n_full * per_bin
    if n_full < bin_ids.size and placed < n_items:
        last, part = bin_ids[n_full: n_full + 1], n_items - placed  # part < per_bin
        placements.place(last, part)
        open_bins.add(last, space - part * width)
        placed += part
    return placed


class _OpenBins:
    # Open bins by free space 0..L: per space a list of ascending arrays of bin ids (merged when
    # read), and how many bins have that space. Full bins (space 0) are dropped.

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts = np.zeros(capacity + 1, dtype=np.int64)
        self._runs: list[list[np.ndarray]] = [[] for _ in range(capacity + 1)]

    def spaces_at_least(self, width: int) -> list[int]:
        """The free spaces >= width that some open bin has, ascending."""
        return (np.flatnonzero(self.counts[width:]) + width).tolist()

    def take(self, space: int, n_bins: int) -> np.ndarray:
        """Remove and return the (at most) n_bins lowest ids among the bins with `space` free."""
        runs = self._runs[space]
        # Bins arrive in runs of ascending ids; a stable sort (timsort) merges the runs cheaply.
        ids = runs[0] if len(runs) == 1 else np.sort(np.concatenate(runs), kind="stable")
        rest = ids[n_bins:]
        self._runs[space] = [rest] if rest.size else []
        self.counts[space] = rest.size
        return ids[:n_bins]

    def add(self, bin_ids: np.ndarray, space: int) -> None:
        """Register bins (ascending ids) that now have `space` free."""
        if space > 0 and bin_ids.size:
            self._runs[space].append(bin_ids)
            self.counts[space] += bin_ids.size


class _Placements:
    # Placements in the order they happen (the decreasing order of the items): runs of
    # consecutive items going to one bin, recorded as (bin, run size, items already in the bin).

    def __init__(self, n_items: int) -> None:
        self.n_items = n_items
        self.n_bins = 0
        self._fill = np.zeros(n_items + 1, dtype=np.int64)  # items per bin so far; bins <= items
        self._bins: list[np.ndarray] = []
        self._sizes: list[np.ndarray] = []
        self._before: list[np.ndarray] = []

    def open_bins(self, n_bins: int) -> np.ndarray:
        """Ids for n_bins new bins (rule 3: the next ids)."""
        self.n_bins += n_bins
        return np.arange(self.n_bins - n_bins, self.n_bins)

    def place(self, bin_ids: np.ndarray, run_size: int) -> None:
        """Each of `bin_ids` (distinct) takes the next `run_size` items, in this order."""
        if bin_ids.size:
            self._bins.append(bin_ids)
            self._sizes.append(np.full(bin_ids.size, run_size, dtype=np.int64))
            self._before.append(self._fill[bin_ids])
            self._fill[bin_ids] += run_size

    def packed_bins(self, items_in_order: np.ndarray) -> PackedBins:
        """Scatter `items_in_order` (the items in placement order) to their bins, without a sort."""
        offsets = np.zeros(self.n_bins + 1, dtype=np.int64)
        np.cumsum(self._fill[: self.n_bins], out=offsets[1:])
        if not self._bins:
            return PackedBins(items_in_order.astype(np.int64), offsets)
        bins, sizes, before = (np.concatenate(parts) for parts in (self._bins, self._sizes, self._before))
        # Run r covers placement positions [start_r, start_r + size_r) and bin slots from
        # offsets[bin_r] + before_r on, so slot = position + (offsets[bin_r] + before_r - start_r).
        run_starts = np.cumsum(sizes) - sizes
        slots = np.repeat(offsets[bins] + before - run_starts, sizes) + np.arange(self.n_items)
        packed = np.empty(self.n_items, dtype=np.int64)
        packed[slots] = items_in_order
        return PackedBins(packed, offsets)


def segment_tree_best_fit_pack(lengths: Sequence[int] | np.ndarray, capacity: int) -> Bins:
    """Best-Fit Decreasing item by item, with a segment tree over remaining capacities, O(N log L).

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
