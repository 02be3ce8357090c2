"""Benchmark: documents packed per second by Best-fit Packing and its baselines.

Packs synthetic heavy-tailed documents (log-normal, median 450, mean 825 tokens) into sequences
of L = 2048 tokens, end to end (chunking, bin packing, building the segment lists) with:
  best_fit         Optimized Best-Fit Decreasing, segment tree over capacities, O(N log L)
  first_fit        First-Fit Decreasing, max-tree over bin ids, O(N log N)
  concat           concatenate-then-split, O(N)
  best_fit_scan    textbook Best-Fit Decreasing scanning every open bin, O(N * bins);
                   only up to --scan-max documents, since it is quadratic
  trl_bfd_split*   RE-IMPLEMENTATION of Hugging Face TRL's pack_dataset(strategy="bfd_split"):
                   best-fit decreasing per 1,000-row map batch (TRL's effective default)
  lf_knapsack*     RE-IMPLEMENTATION of LLaMA-Factory's greedy_knapsack: ascending sort, fill one
                   sequence at a time with the largest item that fits; list.pop makes it O(N^2),
                   so only up to --knapsack-max documents
The two starred packers are written from the libraries' descriptions (benchmarks/peer_packers.py),
since neither library is installed; they receive the same chunks as best_fit (the real
LLaMA-Factory drops over-long examples instead of chunking them).

Prints one table: time per document, documents per second, time relative to best_fit, and the
packing quality (extra sequences over ceil(tokens / L), share of documents truncated).
Not a test. Usage: python benchmarks/bench_packing.py [--huge] [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import numpy as np
from peer_packers import llamafactory_style_greedy_knapsack, trl_style_bfd_split

from testbed.pretrain.bin_packing import Bins, reference_best_fit_pack
from testbed.pretrain.packing import PackingStats, Segment, pack_documents, split_into_chunks
from testbed.pretrain.synthetic_documents import lognormal_document_lengths

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
HUGE_SIZE = 10_000_000


def chunk_then(packer: Callable[[np.ndarray, int], Bins]) -> Callable[[np.ndarray, int], list[list[Segment]]]:
    """Step 1 of Best-fit Packing (chunking), then ``packer`` over the chunks, in the same output form."""
    def pack(lengths: np.ndarray, capacity: int) -> list[list[Segment]]:
        chunks = split_into_chunks(lengths, capacity)
        ends = chunks.starts + chunks.lengths
        return [[Segment(int(chunks.doc_ids[i]), int(chunks.starts[i]), int(ends[i])) for i in bin_items]
                for bin_items in packer(chunks.lengths, capacity)]
    return pack


def packed_with(method: str) -> Callable[[np.ndarray, int], list[list[Segment]]]:
    """``pack_documents`` with this ``method``."""
    return lambda lengths, capacity: pack_documents(lengths, capacity, method)


def packers(
    scan_max: int, knapsack_max: int, n_documents: int,
) -> dict[str, Callable[[np.ndarray, int], list[list[Segment]]]]:
    """The methods to time at this size."""
    methods: dict[str, Callable[[np.ndarray, int], list[list[Segment]]]] = {
        name: packed_with(name) for name in ("best_fit", "first_fit", "concat")
    }
    methods["trl_bfd_split*"] = chunk_then(trl_style_bfd_split)
    if n_documents <= knapsack_max:
        methods["lf_knapsack*"] = chunk_then(llamafactory_style_greedy_knapsack)
    if n_documents <= scan_max:
        methods["best_fit_scan"] = chunk_then(reference_best_fit_pack)
    return methods


def time_packing(
    pack: Callable[[np.ndarray, int], list[list[Segment]]], lengths: np.ndarray, capacity: int
) -> tuple[float, PackingStats]:
    """Seconds taken by one packing run, and the packing's statistics."""
    gc.collect()  # do not bill this run for the previous run's garbage
    start = time.perf_counter()
    sequences = pack(lengths, capacity)
    seconds = time.perf_counter() - start
    return seconds, PackingStats.from_sequences(sequences, lengths, capacity)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--huge", action="store_true", help=f"also run {HUGE_SIZE:,} documents (about 3 minutes, 4 GB)")
    parser.add_argument("--capacity", type=int, default=2048)
    parser.add_argument("--scan-max", type=int, default=10_000, help="largest size for best_fit_scan")
    parser.add_argument("--knapsack-max", type=int, default=100_000, help="largest size for lf_knapsack*")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [*args.sizes, HUGE_SIZE] if args.huge else args.sizes

    header = f"{'documents':>10} {'method':<14} {'seconds':>8} {'us/doc':>8} {'docs/s':>11} {'x best_fit':>10} " \
             f"{'sequences':>10} {'extra seq':>10} {'truncated':>9}"
    print(f"L = {args.capacity}, log-normal lengths (median 450, mean 825), seed {args.seed}")
    warm_up = lognormal_document_lengths(2_000, np.random.default_rng(args.seed))
    # The first calls pay for imports and caches.
    for pack in packers(args.scan_max, args.knapsack_max, len(warm_up)).values():
        pack(warm_up, args.capacity)
    print(header)
    print("-" * len(header))
    for n_documents in sizes:
        lengths = lognormal_document_lengths(n_documents, np.random.default_rng(args.seed))
        best_fit_seconds = None
        for name, pack in packers(args.scan_max, args.knapsack_max, n_documents).items():
            seconds, stats = time_packing(pack, lengths, args.capacity)
            best_fit_seconds = best_fit_seconds or seconds
            print(f"{n_documents:>10,} {name:<14} {seconds:>8.3f} {1e6 * seconds / n_documents:>8.2f} "
                  f"{n_documents / seconds:>11,.0f} {seconds / best_fit_seconds:>10.2f} {stats.n_sequences:>10,} "
                  f"{100 * stats.excess_sequence_share:>9.4f}% {100 * stats.truncated_share:>8.2f}%")


if __name__ == "__main__":
    main()
