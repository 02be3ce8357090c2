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

Run as a script (``python benchmarks/peer_packers.py --trl-child LENGTHS.npy CAPACITY``), it times
the real ``trl.pack_dataset(strategy="bfd_split")`` on those document lengths and prints one JSON
line. bench_packing.py starts it with the interpreter of TRL's own environment (``--trl-python``),
so TRL and its dependencies never need to be installed beside the project; it imports nothing of
the project.
"""

from __future__ import annotations

import argparse
import bisect
import json
import resource
import time
from collections.abc import Sequence
from typing import Any

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


def trl_input(lengths: np.ndarray) -> Any:
    """An in-memory `datasets.Dataset` with one int32 ``input_ids`` list per document, as TRL packs it."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # Token ids 0..49,999 repeated (their values do not matter), made as int32 without an int64 temporary.
    values = np.resize(np.arange(50_000, dtype=np.int32), int(offsets[-1]))
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values)) if offsets[-1] >= 2**31 \
        else pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return datasets.Dataset(InMemoryTable(pa.table({"input_ids": column})))


def time_real_trl(lengths: np.ndarray, capacity: int) -> dict[str, Any]:
    """Wall and CPU seconds of ``trl.pack_dataset(strategy="bfd_split")`` on these lengths, and its sequence count.

    The dataset is built before the clock starts; a 2,000-document run first pays for imports.
    """
    import datasets
    import trl

    datasets.disable_progress_bars()
    datasets.disable_caching()
    trl.pack_dataset(trl_input(lengths[:2_000]), capacity, strategy="bfd_split")
    dataset = trl_input(lengths)
    cpu, start = time.process_time(), time.perf_counter()
    packed = trl.pack_dataset(dataset, capacity, strategy="bfd_split")
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "sequences": len(packed), "trl": trl.__version__,
            "datasets": datasets.__version__, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def main() -> None:
    """``--trl-child LENGTHS.npy CAPACITY``: time real TRL and print one JSON line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl-child", nargs=2, metavar=("LENGTHS_NPY", "CAPACITY"), required=True)
    args = parser.parse_args()
    lengths = np.load(args.trl_child[0])
    print(json.dumps(time_real_trl(lengths, int(args.trl_child[1]))))


if __name__ == "__main__":
    main()
