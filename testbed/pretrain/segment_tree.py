"""Max segment tree, and the open bins by remaining capacity of Optimized Best-Fit Decreasing.

Ding et al. (ICML 2024, "Fewer Truncations Improve Language Modeling", section 3.1) make
Best-Fit Decreasing run in O(N log L) instead of O(N * bins): chunk lengths are integers in
[1, L], so a max-segment tree over the capacities 0..L answers "smallest remaining capacity
that is >= w" in O(log L), whatever the number of open bins.

`MaxSegmentTree` is the one max-tree of the packers: integer leaves, an O(log n) update and an
O(log n) "leftmost leaf holding at least w" query. Item-by-item Best-Fit Decreasing
(`bin_packing.segment_tree_best_fit_pack`, which `best_fit_pack` uses for buffers with few chunks
per distinct length; larger ones are packed a whole length at a time, `grouped_best_fit_pack`)
indexes it by capacity, First-Fit Decreasing (`bin_packing.first_fit_decreasing_pack`) by bin id.

`BinsByCapacity` is that tree over capacities plus, per capacity, a min-heap of the ids of the open bins
with exactly that much space left. The heap makes the tie-break deterministic: among bins with
the same remaining capacity, the one with the lowest id (the oldest bin) is chosen.
"""

from __future__ import annotations

import heapq

# Leaf value meaning "no open bin has this capacity". Item lengths are >= 1, so a leaf holding
# 0 can never satisfy a query.
_EMPTY = 0


class MaxSegmentTree:
    """Leaves 0..size-1 holding integers; each inner node holds the max of its two children.

    Node 1 is the root, node `i` has children `2i` and `2i + 1`, and leaf `j` is node
    `leaf_offset + j`. Padding leaves past `size` hold `fill` like the others.
    """

    __slots__ = ("size", "leaf_offset", "tree")

    def __init__(self, size: int, fill: int = 0) -> None:
        self.size = size
        self.leaf_offset = 1 << max(size - 1, 0).bit_length()  # smallest power of two >= size
        self.tree = [fill] * (2 * self.leaf_offset)

    def __getitem__(self, leaf: int) -> int:
        return self.tree[self.leaf_offset + leaf]

    def leftmost_at_least(self, value: int) -> int:
        """Return the lowest leaf index whose value is >= `value`, or -1 if none."""
        tree = self.tree
        if tree[1] < value:
            return -1
        node = 1
        leaf_offset = self.leaf_offset
        # Descend towards the leftmost leaf whose value is >= value: go left whenever the
        # left subtree still holds one.
        while node < leaf_offset:
            node <<= 1
            if tree[node] < value:
                node += 1
        return node - leaf_offset

    def set(self, leaf: int, value: int) -> None:
        """Give `leaf` the value `value` and update its ancestors."""
        tree = self.tree
        node = self.leaf_offset + leaf
        old = tree[node]
        tree[node] = value
        node >>= 1
        if value >= old:
            # Raising a leaf only raises ancestors; stop as soon as one already covers it.
            while node and tree[node] < value:
                tree[node] = value
                node >>= 1
            return
        # Lowering a leaf may lower ancestors; stop once an ancestor's max is unchanged.
        while node:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node >>= 1


class BinsByCapacity(MaxSegmentTree):
    """Open bins grouped by remaining capacity, with an O(log L) best-fit query.

    A max-tree over the capacities 0..L: leaf `c` holds `c` when at least one open bin has
    exactly `c` free slots, and 0 otherwise. Bins whose remaining capacity is 0 are full and
    never stored.
    """

    __slots__ = ("capacity", "_bins_at")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        super().__init__(capacity + 1, _EMPTY)
        self.capacity = capacity
        self._bins_at: list[list[int]] = [[] for _ in range(capacity + 1)]

    # The smallest remaining capacity >= `length` among open bins, or -1 if none: leaves are
    # ordered by capacity, so the leftmost leaf >= length is the best fit. An alias rather than
    # a wrapper, since segment_tree_best_fit_pack calls it once per item.
    smallest_fitting_capacity = MaxSegmentTree.leftmost_at_least

    def pop_bin(self, remaining: int) -> int:
        """Remove and return the lowest-id bin whose remaining capacity is exactly `remaining`."""
        bins = self._bins_at[remaining]
        bin_id = heapq.heappop(bins)
        if not bins:
            self.set(remaining, _EMPTY)
        return bin_id

    def push_bin(self, bin_id: int, remaining: int) -> None:
        """Register an open bin that has `remaining` free slots (full bins are dropped)."""
        if remaining <= 0:
            return
        bins = self._bins_at[remaining]
        heapq.heappush(bins, bin_id)
        if len(bins) == 1:
            self.set(remaining, remaining)
