"""Segment tree over remaining bin capacities, the core of Optimized Best-Fit Decreasing.

Ding et al. (ICML 2024, "Fewer Truncations Improve Language Modeling", section 3.1) make
Best-Fit Decreasing run in O(N log L) instead of O(N * bins): chunk lengths are integers in
[1, L], so a max-segment tree over the capacities 0..L answers "smallest remaining capacity
that is >= w" in O(log L), whatever the number of open bins.

`BinsByCapacity` holds that tree plus, per capacity, a min-heap of the ids of the open bins
with exactly that much space left. The heap makes the tie-break deterministic: among bins with
the same remaining capacity, the one with the lowest id (the oldest bin) is chosen.
"""

from __future__ import annotations

import heapq

# Leaf value meaning "no open bin has this capacity". Item lengths are >= 1, so a leaf holding
# 0 can never satisfy a query.
_EMPTY = 0


class BinsByCapacity:
    """Open bins grouped by remaining capacity, with an O(log L) best-fit query.

    Leaf `c` of the max-tree holds `c` when at least one open bin has exactly `c` free slots,
    and 0 otherwise; each inner node holds the max of its two children. Bins whose remaining
    capacity is 0 are full and never stored.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._leaf_offset = 1 << capacity.bit_length()  # first power of two > capacity
        self._tree = [_EMPTY] * (2 * self._leaf_offset)
        self._bins_at: list[list[int]] = [[] for _ in range(capacity + 1)]

    def smallest_fitting_capacity(self, length: int) -> int:
        """Return the smallest remaining capacity >= `length` among open bins, or -1 if none."""
        tree = self._tree
        if tree[1] < length:
            return -1
        node = 1
        leaf_offset = self._leaf_offset
        # Descend towards the leftmost leaf whose value is >= length: go left whenever the
        # left subtree can still hold the item, since leaves are ordered by capacity.
        while node < leaf_offset:
            node <<= 1
            if tree[node] < length:
                node += 1
        return node - leaf_offset

    def pop_bin(self, remaining: int) -> int:
        """Remove and return the lowest-id bin whose remaining capacity is exactly `remaining`."""
        bins = self._bins_at[remaining]
        bin_id = heapq.heappop(bins)
        if not bins:
            self._clear_leaf(remaining)
        return bin_id

    def push_bin(self, bin_id: int, remaining: int) -> None:
        """Register an open bin that has `remaining` free slots (full bins are dropped)."""
        if remaining <= 0:
            return
        bins = self._bins_at[remaining]
        heapq.heappush(bins, bin_id)
        if len(bins) == 1:
            self._set_leaf(remaining)

    def _set_leaf(self, remaining: int) -> None:
        # Raising a leaf only raises ancestors; stop as soon as one already covers it.
        tree = self._tree
        node = self._leaf_offset + remaining
        tree[node] = remaining
        node >>= 1
        while node and tree[node] < remaining:
            tree[node] = remaining
            node >>= 1

    def _clear_leaf(self, remaining: int) -> None:
        # Lowering a leaf may lower ancestors; stop once an ancestor's max is unchanged.
        tree = self._tree
        node = self._leaf_offset + remaining
        tree[node] = _EMPTY
        node >>= 1
        while node:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node >>= 1
