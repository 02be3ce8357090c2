"""Pairwise (epsilon, delta) matrices past memory, and their conversion on every core.

The random walk's pairwise matrix (closed form (R2) of `topologies.accounting`) holds n^2 float64
numbers: 7.2 GB at n = 30,000, and the in-memory path keeps three such arrays (the graph term,
rho, epsilon), more than this machine's 24 GiB. `pairwise_epsilon` with ``mode="stream"`` computes
it in blocks of rows instead (a `RowSource` gives rho for any rows), converts each block, writes it
to a ``.npy`` file (``np.load(path, mmap_mode="r")`` reads it back) and keeps in memory only what
the decentralized report and audit read from a matrix (`MatrixSummary`): epsilon by shortest-path
distance (count, mean, min, max, as `topologies.epsilon_by_distance`), the mean over pairs u != v,
the largest pairs and the rows of chosen sources (the audit's upper bounds). The rows of a block
follow from a memory budget (`block_rows`). ``mode="memory"`` keeps the whole matrix, for small n.

The conversion (`convert`, `topologies.linear_rdp_to_dp` entry by entry) runs on one thread per
core over blocks of rows: numpy releases the GIL in its array loops, and every entry is converted
on its own, so the numbers do not depend on the blocks or threads. Where the matrix is symmetric
only the entries right of the diagonal are converted and the rest mirrored. Which matrices are,
checked on the hypercube of 16 nodes, the ring of 16 and an Erdos-Renyi graph of 64
(tests/decentralized/test_dec_matrix_stream.py): the walk's closed form is symmetric in exact
arithmetic (W symmetric, N_u = T/n for every u) but its series rows are not bit for bit (4e-16
relative apart at n = 10^4), so `random_walk_rows` declares it symmetric and a mirrored entry is
the conversion of rho[v, u]. The training accountants' matrices (`testbed.decentralized.privacy`)
are checked entry by entry before the shortcut is taken: local DP's constant matrix is symmetric,
and the walk's visit sums on the hypercube (its shortcut reads rho[u, v] = row0[u XOR v]); the
visit sums elsewhere (ring: 6e-18 relative apart; Erdos-Renyi: 9e-17) and gossip (4e-16 on the
hypercube, 0.8 on Erdos-Renyi) only to rounding or not at all, the first-hitting weights not at all
(0.16 on Erdos-Renyi): those are converted whole.

Scenarios do not select this mode: a scenario's graph has at most `config.MAX_NODES` (4096) nodes,
whose matrices fit in memory, and the runs keep using the in-memory path. The benchmark
(`benchmarks/bench_decentralized.py`, ``--child stream N``) and library callers use it past that.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from testbed.topologies import harmonic_number, linear_rdp_to_dp
from testbed.topologies.chebyshev import BLOCK, graph_term_rows, log_series, spectrum_interval
from testbed.topologies.conversion import CHUNK, DistanceProfile
from testbed.topologies.walks import adjacency, validate_walk

DEFAULT_BUDGET = 1 << 30  # bytes a streamed block may hold
TOP_PAIRS = 16
# Bytes per entry of a streamed block: rho (converted in place), the conversion's two outputs for
# a thread's rows, the hop counts and their integer copy, the selection of the largest pairs.
STREAM_ENTRY_BYTES = 6 * 8
# In memory: rho and epsilon, n x n each (the summaries then go over blocks of rows).
MEMORY_ENTRY_BYTES = 2 * 8
# float32 on disk rounds each entry to within 2^-24 of its value, relative.
FLOAT32_RELATIVE_ERROR = 2.0**-24


@dataclass(frozen=True)
class Conversion:
    """Per-pair zCDP rho (r(alpha) = alpha rho) to epsilon at ``delta``: `topologies.linear_rdp_to_dp`
    with ``method`` over orders up to ``max_order`` (None: all)."""

    delta: float
    method: str = "balle"
    max_order: float | None = None

    def __call__(self, rho: np.ndarray) -> np.ndarray:
        return linear_rdp_to_dp(rho, self.delta, method=self.method, max_order=self.max_order)[0]


@dataclass(frozen=True)
class RowSource:
    """rho of any rows of an n x n pairwise matrix; ``symmetric``: rho[u, v] = rho[v, u] (up to the
    rounding of ``rows``); row blocks should start at multiples of ``align`` (the same numbers then)."""

    n: int
    rows: Callable[[np.ndarray], np.ndarray]  # row indices -> [len(indices), n] float64
    symmetric: bool
    align: int = 1


def random_walk_rows(walk, T: int, sigma: float, sensitivity: float = 1.0, tol: float = 1e-12) -> RowSource:
    """Per-pair zCDP rho of random-walk DP-SGD, closed form (R2) with its graph term by the Chebyshev
    series, for any rows: the numbers of `random_walk_pndp(walk, T=T, sigma=sigma, alpha=2,
    sensitivity=sensitivity, graph_term="chebyshev") / 2`, bit for bit, with the spectrum found once.
    W is checked symmetric and doubly stochastic (N_u = T/n for all u), so rho is symmetric."""
    walk = validate_walk(walk, doubly_stochastic=True, symmetric=True)
    n = walk.shape[0]
    series = log_series(*spectrum_interval(walk), tol)
    offset, scale = harmonic_number(T) / n, 2.0 * sensitivity**2 / sigma**2

    def rows(index: np.ndarray) -> np.ndarray:
        # The operations of `random_walk_pndp` at alpha = 2, then / alpha, in its order.
        block = graph_term_rows(walk, index, tol, series)
        block += offset
        block *= scale
        block *= T / n
        block[np.arange(index.size), index] = 0.0
        block /= 2.0
        return block

    return RowSource(n, rows, symmetric=True, align=BLOCK)


def _workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _in_threads(task: Callable[[int], None], starts: Sequence[int], workers: int | None) -> None:
    """task(start) for every start, on ``workers`` threads (default: one per core)."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(len(starts), workers or _workers())))
    try:
        list(pool.map(task, starts))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C: drop the blocks not started


def _convert_rows(rho: np.ndarray, out: np.ndarray, conversion: Conversion, diagonal: int | None,
                  workers: int | None) -> None:
    """out[r, c:] = conversion of rho there, for the rows r of each piece r0.. of about `CHUNK`
    entries, pieces on threads; c = 0, or with ``diagonal`` (the column of row 0's diagonal entry)
    c = diagonal + r0: only the entries right of the diagonal's pieces. ``out`` may be ``rho``: a
    piece reads its entries before it writes them."""
    rows = max(1, CHUNK // max(1, rho.shape[1]))

    def piece(start: int) -> None:
        part, column = slice(start, start + rows), 0 if diagonal is None else diagonal + start
        out[part, column:] = conversion(rho[part, column:])

    _in_threads(piece, range(0, rho.shape[0], rows), workers)


def is_symmetric(matrix: np.ndarray) -> bool:
    """Whether a square matrix equals its transpose entry by entry (compared in blocks of rows)."""
    n = matrix.shape[0]
    step = max(1, CHUNK // n)
    return all(np.array_equal(matrix[s:s + step], matrix[:, s:s + step].T) for s in range(0, n, step))


def convert(rho, conversion: Conversion, symmetric: bool | None = None, workers: int | None = None) -> np.ndarray:
    """epsilon of every entry of ``rho`` (the numbers of ``conversion(rho)``), a square matrix on one
    thread per core. Symmetric (``None``: checked entry by entry with `is_symmetric`; ``True``: the
    caller knows it is, up to rounding): only the entries right of the diagonal blocks are
    converted, the others mirrored. Anything but a square matrix goes to ``conversion`` whole."""
    rho = np.asarray(rho, dtype=np.float64)
    if rho.ndim != 2 or rho.shape[0] != rho.shape[1]:
        return conversion(rho)
    symmetric = is_symmetric(rho) if symmetric is None else symmetric
    eps = np.empty_like(rho)
    _convert_rows(rho, eps, conversion, 0 if symmetric else None, workers)
    if symmetric:
        rows = max(1, CHUNK // max(1, rho.shape[1]))
        for start in range(0, rho.shape[0], rows):
            eps[start:start + rows, :start] = eps[:start, start:start + rows].T
            _mirror_lower(eps[start:start + rows, start:start + rows])
    return eps


def _mirror_lower(tile: np.ndarray) -> None:
    """Below the diagonal of a square ``tile``, its transpose: the result is exactly symmetric."""
    lower = np.tril_indices(tile.shape[0], -1)
    tile[lower] = tile.T[lower]


@dataclass
class MatrixSummary:
    """What the decentralized report and audit read from a pairwise epsilon matrix, without it."""

    profile: DistanceProfile  # epsilon by hop distance d >= 1 (as `topologies.epsilon_by_distance`)
    mean: float  # over the pairs u != v
    top: np.ndarray  # the largest epsilons of pairs u != v, descending (ties: row-major order)
    top_pairs: np.ndarray  # [len(top), 2]: their (u, v)
    rows: dict[int, np.ndarray] = field(default_factory=dict)  # the rows of the kept sources


class _Summarizer:
    """`MatrixSummary` accumulated over blocks of consecutive rows, in order."""

    def __init__(self, graph, n: int, keep: Sequence[int], top: int, workers: int | None):
        self.adjacency, self.n, self.keep, self.k = adjacency(graph).astype(np.float32), n, set(keep), top
        self.workers = workers
        self.total, self.count = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.low, self.high = np.full(n, np.inf), np.full(n, -np.inf)
        self.sum, self.top, self.pairs = 0.0, np.empty(0), np.empty((0, 2), dtype=np.int64)
        self.rows: dict[int, np.ndarray] = {}

    def add(self, start: int, eps: np.ndarray) -> None:
        index = np.arange(start, start + eps.shape[0])
        self.rows.update({int(u): eps[u - start].copy() for u in index if int(u) in self.keep})
        diagonal = (np.arange(index.size), index)
        kept = eps[diagonal].copy()
        eps[diagonal] = 0.0
        self.sum += float(eps.sum())
        eps[diagonal] = -np.inf  # no pair: out of the largest
        self._largest(start, eps)
        eps[diagonal] = kept
        self._by_distance(self._hops(index), eps)

    def _hops(self, index: np.ndarray) -> np.ndarray:
        """Hop distances [len(index), n] from the nodes ``index`` (0: the node itself, or unreachable):
        a breadth-first search of `BLOCK` sources at a time, one sparse product of the adjacency with
        their frontiers a level, blocks on threads. scipy's `shortest_path` (Dijkstra, one source at
        a time) took 7.4 s of the 34 s of the whole streamed matrix at n = 5,000 (loaded)."""
        hops = np.zeros((index.size, self.n), dtype=np.int32)

        def search(start: int) -> None:
            sources = index[start:start + BLOCK]
            frontier = np.zeros((self.n, sources.size), dtype=np.float32)
            frontier[sources, np.arange(sources.size)] = 1.0
            seen, level = frontier > 0, np.zeros(frontier.shape, dtype=np.int32)
            for distance in range(1, self.n):
                reached = (self.adjacency @ frontier) > 0
                reached &= ~seen
                if not reached.any():
                    break
                seen |= reached
                level[reached] = distance
                frontier = reached.astype(np.float32)
            hops[start:start + sources.size] = level.T

        _in_threads(search, range(0, index.size, BLOCK), self.workers)
        return hops

    def _largest(self, start: int, eps: np.ndarray) -> None:
        """Merge the block's k largest (first in row-major order among equal ones) into the top."""
        flat = eps.reshape(-1)
        k = min(self.k, flat.size)
        threshold = np.partition(flat, flat.size - k)[flat.size - k]
        above = np.flatnonzero(flat > threshold)
        picked = np.concatenate([above, np.flatnonzero(flat == threshold)[:k - above.size]])
        picked = picked[np.isfinite(flat[picked])]
        values = np.concatenate([self.top, flat[picked]])
        pairs = np.concatenate([self.pairs, np.stack([start + picked // self.n, picked % self.n], axis=1)])
        order = np.lexsort((pairs[:, 1], pairs[:, 0], -values))[:self.k]
        self.top, self.pairs = values[order], pairs[order]

    def _by_distance(self, hops: np.ndarray, eps: np.ndarray) -> None:
        """Add the block's pairs at hop distance >= 1 (hops 0: u itself or unreachable)."""
        size = int(hops.max()) + 1
        self.count[:size] += np.bincount(hops.reshape(-1), minlength=size)
        self.total[:size] += np.bincount(hops.reshape(-1), weights=eps.reshape(-1), minlength=size)
        for d in range(1, size):
            values = eps[hops == d]
            if values.size:
                self.low[d], self.high[d] = min(self.low[d], values.min()), max(self.high[d], values.max())

    def result(self) -> MatrixSummary:
        present = np.flatnonzero(self.count[1:]) + 1
        profile = DistanceProfile(present, self.total[present] / self.count[present], self.low[present],
                                  self.high[present], self.count[present])
        return MatrixSummary(profile, self.sum / max(1, self.n * (self.n - 1)), self.top, self.pairs, self.rows)


def block_rows(n: int, budget: int, align: int = 1) -> int:
    """Rows of a streamed block within ``budget`` bytes (`STREAM_ENTRY_BYTES` an entry), a multiple
    of ``align``; at least ``align`` rows, whatever the budget."""
    rows = budget // (STREAM_ENTRY_BYTES * n)
    return int(min(max(align, rows - rows % align), n))


@dataclass
class PairwiseEpsilon:
    """A pairwise epsilon matrix: its summary, and the matrix (``memory``) or its file (``stream``)."""

    summary: MatrixSummary
    mode: str
    block_rows: int
    matrix: np.ndarray | None = None
    path: Path | None = None


def pairwise_epsilon(source: RowSource, graph, conversion: Conversion, *, mode: str = "auto",
                     path: Path | None = None, budget: int = DEFAULT_BUDGET, dtype=np.float64,
                     keep: Sequence[int] = (), top: int = TOP_PAIRS, workers: int | None = None) -> PairwiseEpsilon:
    """The epsilon matrix of ``source`` on ``graph`` and its summary. ``mode``: ``"memory"`` (the
    whole matrix at once), ``"stream"`` (blocks of rows within ``budget`` bytes, written to the
    ``.npy`` file ``path`` as ``dtype``, float64 or float32), ``"auto"`` (memory when the two n x n
    arrays fit the budget, else stream). ``keep``: sources whose rows the summary holds."""
    n = source.n
    if mode == "auto":
        mode = "memory" if MEMORY_ENTRY_BYTES * n * n <= budget else "stream"
    if mode not in ("memory", "stream"):
        raise ValueError(f"unknown matrix mode '{mode}' (known: auto, memory, stream)")
    rows = block_rows(n, budget, source.align)
    summarizer = _Summarizer(graph, n, keep, top, workers)
    if mode == "memory":
        eps = convert(source.rows(np.arange(n)), conversion, source.symmetric or None, workers)
        for start in range(0, n, rows):
            summarizer.add(start, eps[start:start + rows])
        return PairwiseEpsilon(summarizer.result(), mode, rows, matrix=eps)
    if path is None:
        raise ValueError("a streamed matrix needs a path for its file")
    _stream(source, conversion, Path(path), np.dtype(dtype), rows, summarizer, workers)
    return PairwiseEpsilon(summarizer.result(), mode, rows, path=Path(path))


def _stream(source: RowSource, conversion: Conversion, path: Path, dtype: np.dtype, rows: int,
            summarizer: _Summarizer, workers: int | None) -> None:
    """Blocks of ``rows`` rows into ``path`` (written beside it, renamed when complete: never a
    half-written matrix under its name). The file is read and written with plain calls, not mapped:
    a mapping of the rows already written, read a column strip at a time, kept the kernel's
    fault-around pages in the process (3.2 GB peak RSS at n = 20,000 for a 1 GiB budget)."""
    n, partial = source.n, path.with_name(path.name + ".partial")
    header = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(n, n))
    offset = header.offset
    del header
    try:
        with open(partial, "r+b") as handle:
            for start in range(0, n, rows):
                stop = min(n, start + rows)
                block = source.rows(np.arange(start, stop))
                _convert_rows(block, block, conversion, start if source.symmetric else None, workers)
                if source.symmetric:  # the left part is the transpose of rows written already
                    block[:, :start] = _read_columns(handle, offset, dtype, n, start, stop).T
                    _mirror_lower(block[:, start:stop])
                handle.seek(offset + start * n * dtype.itemsize)
                np.ascontiguousarray(block, dtype=dtype).tofile(handle)
                summarizer.add(start, block)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before it takes its name
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _read_columns(handle, offset: int, dtype: np.dtype, n: int, start: int, stop: int) -> np.ndarray:
    """Columns start..stop of the first ``start`` rows of the n x n matrix in ``handle``."""
    strip = np.empty((start, stop - start), dtype=dtype)
    handle.flush()
    for row in range(start):
        handle.seek(offset + (row * n + start) * dtype.itemsize)
        handle.readinto(memoryview(strip[row]).cast("B"))
    return strip
