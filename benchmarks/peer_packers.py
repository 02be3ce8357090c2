"""Re-implementations of two peer libraries' sequence packers, for the packing benchmark only.

Neither library is a dependency; both functions are written from the algorithms' published
descriptions (see /work/shared/reference/pretraining.md, section 2.1), not from their code, and are
named as re-implementations wherever they are reported. When `trl` is installed (the `bench`
extra), benchmarks/bench_packing.py also times the real `trl.pack_dataset` beside them. Both take
chunk lengths (every length in [1, capacity]) and return bins of chunk indices, like
`testbed.pretrain.bin_packing`.

- `trl_style_bfd_split`: Hugging Face TRL's ``pack_dataset(strategy="bfd_split")``. Over-long rows
  are split into chunks of at most L (done by the caller here, as for every method); each
  ``datasets.map`` batch (1,000 rows by default, since ``pack_dataset`` passes no batch size) is
  sorted by decreasing length and packed best-fit with a segment tree over remaining space and a
  ``space -> bins`` map. Among bins with the same space the most recently used one is taken
  (a list ``pop``).
- `llamafactory_style_greedy_knapsack`: LLaMA-Factory's ``greedy_knapsack`` (SFT packing). Lengths
  are sorted ascending; knapsacks are filled one at a time, each time with the largest remaining
  item that still fits (``bisect``), removed with ``list.pop(i)`` (O(n) each, O(n^2) worst case).
  LLaMA-Factory drops examples longer than the cutoff; here it receives the same chunks as every
  other method, so no tokens are lost.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

TRL_MAP_BATCH_SIZE = 1_000


class _MaxTree:
    """Max segment tree over values 1..capacity: which remaining spaces some open bin has.

    Not `testbed.pretrain.segment_tree.MaxSegmentTree` on purpose: `set` here recomputes every
    ancestor up to the root (no early stop). This is the tree the timings in
    docs/reproduction/pretraining.md section 4 measured; on the shared tree this packer packs the
    same bins about twice as fast, which would change that table.
    """

    def __init__(self, capacity: int):
        self.size = 1 << capacity.bit_length()
        self.tree = [0] * (2 * self.size)

    def set(self, value: int, present: bool) -> None:
        node = self.size + value - 1
        self.tree[node] = value if present else 0
        node //= 2
        while node:
            self.tree[node] = max(self.tree[2 * node], self.tree[2 * node + 1])
            node //= 2

    def smallest_at_least(self, value: int) -> int:
        """The smallest present value >= ``value`` (0 if none)."""
        if self.tree[1] < value:
            return 0
        node = 1
        while node < self.size:
            node = 2 * node if self.tree[2 * node] >= value else 2 * node + 1
        return self.tree[node]


def trl_style_bfd_split(lengths: Sequence[int] | np.ndarray, capacity: int,
                        batch_size: int = TRL_MAP_BATCH_SIZE) -> list[list[int]]:
    """Best-fit decreasing per batch of ``batch_size`` chunks, as TRL packs each map batch."""
    lengths = np.asarray(lengths, dtype=np.int64)
    bins: list[list[int]] = []
    for low in range(0, lengths.size, batch_size):
        batch = lengths[low: low + batch_size]
        order = np.argsort(-batch, kind="stable") + low
        tree = _MaxTree(capacity)
        tree.set(capacity, True)  # a fresh bin is always available
        space_to_bins: dict[int, list[int]] = {}
        for item in order.tolist():
            length = int(lengths[item])
            space = tree.smallest_at_least(length)
            if space == capacity:
                bin_id = len(bins)
                bins.append([])
            else:
                waiting = space_to_bins[space]
                bin_id = waiting.pop()
                if not waiting:
                    tree.set(space, False)
            bins[bin_id].append(item)
            left = space - length
            if left > 0:
                space_to_bins.setdefault(left, []).append(bin_id)
                tree.set(left, True)
    return bins


def llamafactory_style_greedy_knapsack(lengths: Sequence[int] | np.ndarray, capacity: int) -> list[list[int]]:
    """Fill one knapsack at a time with the largest remaining item that fits."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    sorted_lengths = np.asarray(lengths, dtype=np.int64)[order].tolist()
    sorted_items = order.tolist()
    knapsacks: list[list[int]] = []
    while sorted_lengths:
        knapsack, remaining = [], capacity
        while True:
            index = bisect.bisect_right(sorted_lengths, remaining) - 1
            if index < 0:
                break
            remaining -= sorted_lengths.pop(index)
            knapsack.append(sorted_items.pop(index))
        knapsacks.append(knapsack)
    return knapsacks
