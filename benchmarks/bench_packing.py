"""Benchmark: documents packed per second by Best-fit Packing, its baselines and real TRL.

Packs synthetic heavy-tailed documents (log-normal, median 450, mean 825 tokens) into sequences
of L = 2048 tokens, end to end (chunking, bin packing, building the output) with:
  best_fit_arrays  Best-Fit Decreasing, all chunks of one length placed together (numpy), output
                   as columns (`pack_arrays`: doc, start, end per piece, offsets per sequence);
                   what the corpus preparation uses. The reference of the "x arrays" column.
  best_fit         the same packing as Segment lists (`pack_documents`)
  best_fit_tree    the previous best_fit: item by item with a segment tree over capacities
  first_fit        First-Fit Decreasing, max-tree over bin ids, O(N log N)
  concat           concatenate-then-split, one vectorized pass, as Segment lists
  concat_arrays    the same, as columns (`pack_arrays`)
  best_fit_scan    textbook Best-Fit Decreasing scanning every open bin, O(N * bins);
                   only up to --scan-max documents, since it is quadratic
  trl_bfd_split*   RE-IMPLEMENTATION of Hugging Face TRL's pack_dataset(strategy="bfd_split"):
                   best-fit decreasing per 1,000-row map batch (TRL's effective default)
  lf_knapsack*     RE-IMPLEMENTATION of LLaMA-Factory's greedy_knapsack: ascending sort, fill one
                   sequence at a time with the largest item that fits; list.pop makes it O(N^2),
                   so only up to --knapsack-max documents
  TRL pack_dataset the real `trl.pack_dataset(dataset, L, strategy="bfd_split")` with its default
                   map batch (1,000 rows), run in TRL's own environment: a child process of
                   --trl-python (default: this interpreter) running benchmarks/peer_packers.py
                   on the same lengths, only up to --trl-max documents. Its input is an in-memory
                   `datasets.Dataset` with one int32 `input_ids` list per document (built before
                   the clock starts; 3.3 GB at 10^6 documents, 33 GB at 10^7, hence the cap); its
                   output holds the packed token columns, while the project's packers output
                   segment boundaries, so TRL also pays for moving the tokens.
The starred packers are written from the libraries' descriptions (benchmarks/peer_packers.py);
they receive the same chunks as best_fit (the real LLaMA-Factory drops over-long examples).
Methods that build one Python object per piece run only up to --lists-max documents.

Prints one table per size (time per document, documents per second, time relative to
best_fit_arrays, sequences relative to the lower bound ceil(tokens / L), share of documents
truncated), then best_fit_arrays against real TRL (wall and CPU), then a streaming row:
--stream-size documents (default 10^7) read one length at a time from a generator and packed in
buffers of --buffer-size documents, each in a fresh child process so that its peak resident
memory (VmHWM) is its own; a 10x smaller stream shows whether memory stays flat.
Not a test. Usage: python benchmarks/bench_packing.py [--sizes 100000 1000000 10000000]
                   [--trl-python /path/to/trl-env/bin/python] [--stream-size 0]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from peer_packers import __file__ as peer_packers_path
from peer_packers import llamafactory_style_greedy_knapsack, trl_style_bfd_split

from testbed.pretrain.bin_packing import Bins, reference_best_fit_pack, segment_tree_best_fit_pack
from testbed.pretrain.packing import (
    PackedArrays,
    PackingStats,
    Segment,
    iter_bin_packed_arrays,
    iter_packed_sequences,
    pack_arrays,
    pack_documents,
    split_into_chunks,
)
from testbed.pretrain.synthetic_documents import lognormal_document_lengths

DEFAULT_SIZES = (100_000, 1_000_000, 10_000_000)
STREAM_SIZE = 10_000_000
# "<method> mmap" reads the lengths from a memory-mapped .npy file instead of a generator of ints,
# which is how a prepared corpus holds them and leaves out the generator's per-document cost.
STREAM_METHODS = ("best_fit", "best_fit_arrays", "concat", "best_fit mmap", "best_fit_arrays mmap")
# (sequences, segment documents) of one packing: what PackingStats needs.
Packing = tuple[int, np.ndarray | None]


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


def as_arrays(method: str) -> Callable[[np.ndarray, int], PackedArrays]:
    """``pack_arrays`` with this ``method``."""
    return lambda lengths, capacity: pack_arrays(lengths, capacity, method)


def packers(args: argparse.Namespace, n_documents: int) -> dict[str, Callable[[np.ndarray, int], Any]]:
    """The project's methods and the re-implemented peers to time at this size."""
    methods: dict[str, Callable[[np.ndarray, int], Any]] = {"best_fit_arrays": as_arrays("best_fit"),
                                                            "concat_arrays": as_arrays("concat")}
    if n_documents > args.lists_max:
        return methods
    methods["best_fit"] = packed_with("best_fit")
    methods["best_fit_tree"] = chunk_then(segment_tree_best_fit_pack)
    methods.update({name: packed_with(name) for name in ("first_fit", "concat")})
    methods["trl_bfd_split*"] = chunk_then(trl_style_bfd_split)
    knapsack_max, scan_max = args.knapsack_max, args.scan_max
    if n_documents <= knapsack_max:
        methods["lf_knapsack*"] = chunk_then(llamafactory_style_greedy_knapsack)
    if n_documents <= scan_max:
        methods["best_fit_scan"] = chunk_then(reference_best_fit_pack)
    return methods


def as_packing(result: Any) -> Packing:
    """Sequence count and segment documents of a packer's output (Segment lists or columns)."""
    if isinstance(result, PackedArrays):
        return result.n_sequences, result.doc_ids
    return len(result), np.fromiter((segment[0] for seq in result for segment in seq), dtype=np.int64)


def time_packing(pack: Callable[[np.ndarray, int], Any], lengths: np.ndarray,
                 capacity: int) -> tuple[float, float, Packing]:
    """Wall and CPU seconds taken by one packing run, and what its statistics need."""
    gc.collect()  # do not bill this run for the previous run's garbage
    cpu, start = time.process_time(), time.perf_counter()
    result = pack(lengths, capacity)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu_seconds, as_packing(result)


def real_trl(lengths: np.ndarray, capacity: int, python: str) -> dict[str, Any] | None:
    """Real TRL's timing on these lengths, from a child process of its own environment's ``python``;
    None (with one printed line) where that environment cannot import trl."""
    with tempfile.TemporaryDirectory() as folder:
        np.save(f"{folder}/lengths.npy", lengths)
        child = subprocess.run([python, peer_packers_path, "--trl-child", f"{folder}/lengths.npy", str(capacity)],
                               capture_output=True, text=True)
    if child.returncode:
        print(f"{'':>10} real TRL skipped: {(child.stderr.strip().splitlines() or ['no output'])[-1]} "
              f"(give --trl-python an environment with trl installed, e.g. pip install 'trl>=1.16')")
        return None
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def print_row(n_documents: int, name: str, seconds: float, reference_seconds: float, packing: Packing,
              lengths: np.ndarray, capacity: int) -> PackingStats:
    """One table row; returns the packing's statistics."""
    n_sequences, segment_docs = packing
    stats = PackingStats.from_segment_documents(
        segment_docs if segment_docs is not None else np.zeros(0, np.int64), n_sequences, lengths, capacity)
    truncated = f"{100 * stats.truncated_share:>8.2f}%" if segment_docs is not None else f"{'n/a':>9}"
    print(f"{n_documents:>10,} {name:<16} {seconds:>8.3f} {1e6 * seconds / n_documents:>8.2f} "
          f"{n_documents / seconds:>11,.0f} {seconds / reference_seconds:>10.2f} {stats.n_sequences:>10,} "
          f"{stats.n_sequences / stats.lower_bound:>9.5f} {truncated}")
    return stats


def run_size(n_documents: int, args: argparse.Namespace) -> None:
    """Time every method on one set of documents, then print best_fit_arrays against real TRL."""
    lengths = lognormal_document_lengths(n_documents, np.random.default_rng(args.seed))
    results: dict[str, tuple[float, float, PackingStats]] = {}
    for name, pack in packers(args, n_documents).items():
        seconds, cpu_seconds, packing = time_packing(pack, lengths, args.capacity)
        reference = results["best_fit_arrays"][0] if results else seconds
        results[name] = seconds, cpu_seconds, print_row(n_documents, name, seconds, reference, packing, lengths,
                                                        args.capacity)
    seconds, cpu_seconds, ours = results["best_fit_arrays"]
    print(f"{'':>10} -> best_fit_arrays {1e6 * seconds / n_documents:.3f} us/doc ({1e6 * cpu_seconds / n_documents:.3f}"
          f" CPU), sequences / lower bound {ours.n_sequences / ours.lower_bound:.6f}")
    trl = real_trl(lengths, args.capacity, args.trl_python) if n_documents <= args.trl_max else None
    if trl is not None:
        trl_ratio = trl["sequences"] / ours.lower_bound
        print(f"{n_documents:>10,} {'TRL pack_dataset':<16} {trl['seconds']:>8.3f} "
              f"{1e6 * trl['seconds'] / n_documents:>8.2f} {n_documents / trl['seconds']:>11,.0f} "
              f"{trl['seconds'] / seconds:>10.2f} {trl['sequences']:>10,} {trl_ratio:>9.5f} {'n/a':>9}")
        print(f"{'':>10} -> TRL {trl['trl']} (datasets {trl['datasets']}, its own environment): "
              f"best_fit_arrays takes {seconds / trl['seconds']:.4f}x TRL's wall time "
              f"({cpu_seconds / trl['cpu_seconds']:.4f}x its CPU); sequences / lower bound "
              f"{ours.n_sequences / ours.lower_bound:.6f} vs TRL {trl_ratio:.6f}")


def length_blocks(n_documents: int, seed: int, block: int = 100_000) -> Iterator[np.ndarray]:
    """Log-normal lengths drawn one block at a time (nothing is kept)."""
    rng = np.random.default_rng(seed)
    for low in range(0, n_documents, block):
        yield lognormal_document_lengths(min(block, n_documents - low), rng)


def streamed_lengths(n_documents: int, seed: int) -> Iterator[int]:
    """The lengths of `length_blocks`, handed out one by one."""
    for block in length_blocks(n_documents, seed):
        yield from block.tolist()


def memory_kib() -> tuple[int, int]:
    """(resident, peak resident) memory of this process in KiB.

    From /proc/self/status where there is one: after fork and exec, ru_maxrss still counts the
    parent's pages, while VmHWM starts afresh with the new program.
    """
    try:
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
        return int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak, peak


def memory_mapped_lengths(n_documents: int, seed: int, folder: str) -> np.ndarray:
    """The stream's lengths written block by block to a .npy file, opened memory-mapped."""
    path = f"{folder}/lengths.npy"
    stored = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(n_documents,))
    low = 0
    for block in length_blocks(n_documents, seed):
        stored[low: low + block.size] = block
        low += block.size
    stored.flush()
    del stored
    return np.load(path, mmap_mode="r")


def stream_child(method: str, n_documents: int, capacity: int, buffer_size: int, seed: int) -> None:
    """In a child process: pack a stream, print seconds, sequences, tokens and memory."""
    method, _, source = method.partition(" ")
    with tempfile.TemporaryDirectory() as folder:
        lengths: Iterable[int] = (memory_mapped_lengths(n_documents, seed, folder) if source == "mmap"
                                  else streamed_lengths(n_documents, seed))
        before_kib, _ = memory_kib()
        start = time.perf_counter()
        if method == "best_fit_arrays":
            n_sequences = 0
            for rows, offsets in iter_bin_packed_arrays(lengths, capacity, "best_fit", buffer_size):
                n_sequences += offsets.size - 1
                del rows, offsets  # a consumer that keeps nothing: only the packer's memory is measured
        else:
            # concat's output does not depend on the block size; its default block is the fastest.
            n_sequences = sum(1 for _ in iter_packed_sequences(lengths, capacity, method,
                                                               None if method == "concat" else buffer_size))
        seconds = time.perf_counter() - start
        _, peak_kib = memory_kib()
    tokens = sum(int(block.sum()) for block in length_blocks(n_documents, seed))  # the same stream, after the clock
    print(seconds, n_sequences, tokens, before_kib, peak_kib)


def run_streams(args: argparse.Namespace) -> None:
    """The streaming rows: each method at stream_size / 10 and stream_size documents, one child each."""
    print(f"\nstreaming: lengths from a generator, buffers of {args.buffer_size:,} documents, one child process per "
          f"row (peak RSS = VmHWM; before = RSS at the start of packing)")
    print(f"{'documents':>11} {'method':<20} {'seconds':>8} {'us/doc':>7} {'seq / LB':>9} "
          f"{'RSS before':>10} {'peak RSS':>9}")
    for n_documents in (args.stream_size // 10, args.stream_size):
        for method in STREAM_METHODS:
            command = [sys.executable, __file__, "--stream-child", method, str(n_documents), "--capacity",
                       str(args.capacity), "--buffer-size", str(args.buffer_size), "--seed", str(args.seed)]
            fields = subprocess.run(command, check=True, capture_output=True, text=True).stdout.split()
            seconds, n_sequences, tokens = float(fields[0]), int(fields[1]), int(fields[2])
            before_mib, peak_mib = int(fields[3]) / 1024, int(fields[4]) / 1024
            lower_bound = -(-tokens // args.capacity)
            print(f"{n_documents:>11,} {method:<20} {seconds:>8.2f} {1e6 * seconds / n_documents:>7.2f} "
                  f"{n_sequences / lower_bound:>9.5f} {before_mib:>8.0f}MB {peak_mib:>7.0f}MB")


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(DEFAULT_SIZES))
    parser.add_argument("--capacity", type=int, default=2048)
    parser.add_argument("--scan-max", type=int, default=10_000, help="largest size for best_fit_scan")
    parser.add_argument("--knapsack-max", type=int, default=100_000, help="largest size for lf_knapsack*")
    parser.add_argument("--trl-max", type=int, default=1_000_000, help="largest size for real TRL")
    parser.add_argument("--trl-python", default=sys.executable,
                        help="the python of the environment where trl is installed (default: this one)")
    parser.add_argument("--lists-max", type=int, default=1_000_000,
                        help="largest size for the methods that build Python lists")
    parser.add_argument("--stream-size", type=int, default=STREAM_SIZE, help="documents in the streaming row (0: skip)")
    parser.add_argument("--buffer-size", type=int, default=1_000_000, help="documents per buffer when streaming")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stream-child", nargs=2, metavar=("METHOD", "DOCUMENTS"), help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    """Run the benchmark and print the tables."""
    args = parse_args()
    if args.stream_child:
        stream_child(args.stream_child[0], int(args.stream_child[1]), args.capacity, args.buffer_size, args.seed)
        return
    print(f"L = {args.capacity}, log-normal lengths (median 450, mean 825), seed {args.seed}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    warm_up = lognormal_document_lengths(2_000, np.random.default_rng(args.seed))
    # The first calls pay for imports and caches (TRL's child process warms up on its own).
    for pack in packers(args, len(warm_up)).values():
        pack(warm_up, args.capacity)
    header = f"{'documents':>10} {'method':<16} {'seconds':>8} {'us/doc':>8} {'docs/s':>11} {'x arrays':>10} " \
             f"{'sequences':>10} {'seq / LB':>9} {'truncated':>9}"
    print(header)
    print("-" * len(header))
    for n_documents in args.sizes:
        run_size(n_documents, args)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.stream_size:
        run_streams(args)


if __name__ == "__main__":
    main()
