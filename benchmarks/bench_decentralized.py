"""Decentralized privacy accounting and random-walk training: timings and ratios (not a test).

1. The pairwise (epsilon, delta) matrix of random-walk DP-SGD (closed form (R2) of
   `topologies.random_walk_pndp`, then `topologies.linear_rdp_to_dp` on every pair) on an
   Erdos-Renyi graph (p = 1.2 ln n / n) at n = 512 and 2048, and 10,000 with ``--full``: its graph
   term by the dense eigendecomposition (the yardstick) and by the Chebyshev expansion on the
   sparse walk, side by side: wall time, CPU time, peak memory (max RSS of a fresh child process
   per size and method), and the largest relative difference of sampled rows of rho from the
   finite sum (R1), computed independently by powers of W (R2 - R1 is below 1e-40 here). The
   conversion to (epsilon, delta) runs on one thread per core, each pair once (rho is symmetric).
1b. The same matrix streamed in blocks of rows to a float64 file within a 1 GiB budget
   (`testbed.decentralized.matrix_stream`), only its summaries in memory, at n = 2048 and, with
   ``--full``, 10,000, 20,000 and 30,000 (three in-memory n x n arrays at 30,000 would be 21.6 GB).
2. Sources-only rows (k = 8 chosen nodes) by the Chebyshev expansion, at n = 10,000 and, with
   ``--full``, 100,000: no n x n array anywhere.
3. The same matrix at n = 256, vectorised against a naive per-pair loop (each entry from the
   shared eigendecomposition by its own dot product, each conversion by `rdp_to_dp` over a grid of
   200 orders up to the valid maximum): CPU-time ratio.
4. Random-walk DP-SGD steps per second with the nodes vectorised in-process, on Ray actors
   (in-process Ray, 2 CPUs) and on MPI ranks (``mpiexec -n 2``), same scenario and seed; the
   training chunks only, after start-up; the three final tokens are compared.

    python benchmarks/bench_decentralized.py            # n = 512, 2048; ~3 minutes
    python benchmarks/bench_decentralized.py --full     # adds n = 10,000 (eigh: ~10 minutes), the streamed
                                                        # matrix to 30,000 (~10 minutes) and 100,000 rows
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

SIZES = (512, 2048)
FULL_SIZE = 10_000
SOURCES_SIZE = 100_000
STREAM_SIZES = (10_000, 20_000, 30_000)  # with --full; 2048 always
DELTA, SIGMA = 1e-5, 1.0


def pairwise_matrix(n: int, graph_term: str) -> dict:
    """Time the pairwise matrix at size n in this process with the given graph-term method;
    report peak RSS, the time of the conversion to (epsilon, delta) alone (one thread per core,
    each pair once: the walk's rho is symmetric, `matrix_stream.convert`), and the error of
    sampled rows against the finite sum."""
    from testbed.decentralized.matrix_stream import Conversion, convert
    from testbed.topologies import build_graph, max_valid_order, metropolis_hastings, random_walk_pndp, walk_length

    graph = build_graph("erdos_renyi", n=n, seed=0)
    walk = metropolis_hastings(graph, sparse=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    steps = walk_length(walk, SIGMA)
    rho = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0, graph_term=graph_term)
    rho /= 2.0  # eps(alpha) / alpha: the per-pair zCDP rho
    converting, cpu_converting = time.perf_counter(), time.process_time()
    conversion = Conversion(DELTA, "balle", max_valid_order(SIGMA))
    eps = convert(rho, conversion, symmetric=True)
    end, cpu_end = time.perf_counter(), time.process_time()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The yardstick, after the peak was read: one `linear_rdp_to_dp` call over every pair, one thread.
    whole, cpu_whole = time.perf_counter(), time.process_time()
    every_pair = conversion(rho)
    whole, cpu_whole = time.perf_counter() - whole, time.process_time() - cpu_whole
    return {"n": n, "method": graph_term, "walk_steps": steps, "seconds": end - start, "cpu_s": cpu_end - cpu_start,
            "conversion_s": end - converting, "conversion_cpu_s": cpu_end - cpu_converting,
            "one_call_conversion_s": whole, "one_call_conversion_cpu_s": cpu_whole,
            "conversion_rel_difference": float(np.max(np.abs(eps - every_pair) / np.maximum(every_pair, 1e-300))),
            "asymmetry": float(np.abs(rho - rho.T).max() / rho.max()),
            "peak_rss_mb": peak_mb, "max_epsilon": float(eps.max()),
            "rows_rel_error": _rows_error(walk, steps, rho)}


def streamed_matrix(n: int, budget_mb: int = 1024) -> dict:
    """The same matrix streamed in blocks of rows to a float64 .npy file (`matrix_stream`), with only
    its summaries in memory: time, CPU, peak RSS; the largest relative difference of sampled
    epsilon rows, read back from the file, from the conversion of the finite sum (R1)'s rows."""
    import tempfile
    from pathlib import Path

    from testbed.decentralized.matrix_stream import Conversion, pairwise_epsilon, random_walk_rows
    from testbed.topologies import build_graph, max_valid_order, metropolis_hastings, random_walk_pndp, walk_length

    graph = build_graph("erdos_renyi", n=n, seed=0)
    walk = metropolis_hastings(graph, sparse=True)
    conversion = Conversion(DELTA, "balle", max_valid_order(SIGMA))
    with tempfile.TemporaryDirectory(dir=".") as folder:
        path = Path(folder) / "eps.npy"
        start, cpu_start = time.perf_counter(), time.process_time()
        steps = walk_length(walk, SIGMA)
        result = pairwise_epsilon(random_walk_rows(walk, steps, SIGMA), graph, conversion, mode="stream",
                                  path=path, budget=budget_mb << 20)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sources = np.random.default_rng(1).choice(n, size=4, replace=False)
        rows = np.load(path, mmap_mode="r")[np.sort(sources)]
    reference = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0, method="finite_sum",
                                 sources=np.sort(sources)) / 2.0
    expected, off = conversion(reference), reference > 0
    return {"n": n, "walk_steps": steps, "seconds": seconds, "cpu_s": cpu, "peak_rss_mb": peak_mb,
            "block_rows": result.block_rows, "file_gb": n * n * 8 / 1e9, "max_epsilon": float(result.summary.top[0]),
            "rows_rel_error": float(np.max(np.abs(rows[off] - expected[off]) / expected[off]))}


def _rows_error(walk, steps: int, rho: np.ndarray, rows: int = 4) -> float:
    """Largest relative difference of ``rows`` sampled rows of rho from the finite sum (R1)."""
    from testbed.topologies import random_walk_pndp

    sources = np.random.default_rng(1).choice(walk.shape[0], size=rows, replace=False)
    reference = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0, method="finite_sum", sources=sources) / 2.0
    off = reference > 0
    return float(np.max(np.abs(rho[sources][off] - reference[off]) / reference[off]))


def sources_only(n: int, k: int = 8) -> dict:
    """Rows of k nodes by the Chebyshev expansion: time, peak RSS and the error against (R1)."""
    from testbed.topologies import build_graph, metropolis_hastings, random_walk_pndp, walk_length

    walk = metropolis_hastings(build_graph("erdos_renyi", n=n, seed=0), sparse=True)
    sources = np.random.default_rng(2).choice(n, size=k, replace=False)
    start = time.perf_counter()
    steps = walk_length(walk, SIGMA)
    rho = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0, sources=sources, graph_term="chebyshev") / 2.0
    seconds = time.perf_counter() - start
    reference = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0, method="finite_sum", sources=sources) / 2.0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    off = reference > 0
    return {"n": n, "k": k, "walk_steps": steps, "seconds": seconds, "peak_rss_mb": peak_mb,
            "rows_rel_error": float(np.max(np.abs(rho[off] - reference[off]) / reference[off]))}


def naive_versus_vectorised(n: int = 256) -> dict:
    """The same epsilon matrix entry by entry in Python loops, and vectorised."""
    import scipy.linalg as sla

    from testbed.topologies import (
        build_graph,
        harmonic_number,
        linear_rdp_to_dp,
        max_valid_order,
        metropolis_hastings,
        random_walk_pndp,
        rdp_to_dp,
        walk_length,
    )

    walk = metropolis_hastings(build_graph("erdos_renyi", n=n, seed=0))
    steps, top = walk_length(walk, SIGMA), max_valid_order(SIGMA)
    timings = []
    for _ in range(3):  # best of three: the vectorised path is short enough for noise to matter
        start = time.process_time()
        rho = random_walk_pndp(walk, T=steps, sigma=SIGMA, alpha=2.0) / 2.0
        fast, _ = linear_rdp_to_dp(rho, DELTA, max_order=top)
        timings.append(time.process_time() - start)
    vectorised = min(timings)

    start = time.process_time()
    mu, phi = sla.eigh(np.eye(n) - walk + 1.0 / n)
    log_mu = -np.log(mu)
    orders = np.linspace(1.0 + 1e-3, top, 200)
    slow = np.zeros((n, n))
    for u in range(n):
        for v in range(n):
            if u != v:
                term = float(np.dot(phi[u] * log_mu, phi[v])) + harmonic_number(steps) / n
                pair_rho = steps / n / SIGMA**2 * term
                slow[u, v] = rdp_to_dp(orders * pair_rho, orders, DELTA)[0]
    naive = time.process_time() - start
    return {"n": n, "vectorised_s": vectorised, "naive_s": naive, "speedup": naive / vectorised,
            "max_abs_difference": float(np.abs(slow - fast).max())}


WALK_SCENARIO = {
    "name": "bench-walk", "kind": "decentralized", "seed": 1,
    "data": {"dataset": "digits", "num_clients": 16},
    "decentralized": {"algorithm": "random_walk", "topology": {"name": "hypercube", "dim": 4},
                      "model": {"arch": "logreg"}, "sigma": 1.0, "lr": 0.1, "steps": 600,
                      "eval_every": 600, "checkpoint_every": 600, "comparison": {"enabled": False}},
}


def walk_throughput(steps: int = 600) -> dict:
    """Random-walk steps per second on the three node backends."""
    import torch

    from testbed.decentralized.backends import local_chunk, prepared
    from testbed.decentralized.hosted_nodes import HostedNodes
    from testbed.decentralized.phase import PhaseArgs
    from testbed.decentralized.spmd_nodes import spmd_chunk
    from testbed.decentralized.steps import initial_state
    from testbed.engines.config import LocalEngineConfig, MpiEngineConfig
    from testbed.engines.mpi_engine import MpiEngine
    from testbed.engines.ray_engine import LocalRayEngine
    from testbed.scenario import Scenario

    data = Scenario.model_validate(WALK_SCENARIO).model_dump(mode="json")
    args = PhaseArgs("random_walk", 0.1, 1.0, steps, steps, steps)
    problem, phase, _ = prepared(data, args)
    fresh = lambda: initial_state(problem, phase)
    results, tokens = {}, {}

    local_chunk(data, args, fresh(), 0, 10)  # warm-up (imports, caches)
    start = time.perf_counter()
    state, _ = local_chunk(data, args, fresh(), 0, steps)
    results["local"], tokens["local"] = steps / (time.perf_counter() - start), state["token"]

    with (LocalRayEngine(LocalEngineConfig(num_cpus=2), quiet=True) as engine,
          HostedNodes(engine, data, problem.n) as hosts):
        hosts.run_chunk(args, fresh(), 0, 10)
        start = time.perf_counter()
        state, _ = hosts.run_chunk(args, fresh(), 0, steps)
        results["ray"], tokens["ray"] = steps / (time.perf_counter() - start), state["token"]

    with MpiEngine(MpiEngineConfig(type="mpi", num_procs=2)) as pool:
        pool.spmd(spmd_chunk, data, args, fresh(), 0, 10)
        start = time.perf_counter()
        state, _ = pool.spmd(spmd_chunk, data, args, fresh(), 0, steps)
        results["mpi"], tokens["mpi"] = steps / (time.perf_counter() - start), state["token"]
    gaps = {k: float((tokens[k] - tokens["local"]).abs().max()) for k in ("ray", "mpi")}
    return {"steps_per_s": results, "max_token_difference_vs_local": gaps, "torch_threads": torch.get_num_threads()}


def _child(*args: str) -> dict:
    """Run one measurement in a fresh interpreter, so its peak RSS is its own."""
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also n = 10,000 (eigh: ~10 minutes) and 100,000 rows")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        kind, n, *rest = options.child
        if kind == "stream":
            result = streamed_matrix(int(n), *(int(x) for x in rest))
        else:
            result = pairwise_matrix(int(n), rest[0]) if kind == "matrix" else sources_only(int(n))
        print(json.dumps(result))
        return
    print("1. pairwise (epsilon, delta) matrix of random-walk DP-SGD, Erdos-Renyi graphs; graph term by")
    print("   eigh (dense, the yardstick) and by the Chebyshev series (sparse); rows checked against (R1)")
    for n in SIZES + ((FULL_SIZE,) if options.full else ()):
        runs = {method: _child("matrix", str(n), method) for method in ("eigh", "chebyshev")}
        for r in runs.values():
            print(f"   n = {r['n']:6d}  {r['method']:9s}  T = {r['walk_steps']:5d}  {r['seconds']:8.2f} s wall"
                  f"  {r['cpu_s']:8.2f} s CPU  peak RSS {r['peak_rss_mb']:6.0f} MB  max eps {r['max_epsilon']:.4f}"
                  f"  rows vs (R1): {r['rows_rel_error']:.1e} relative")
        print(f"   n = {n:6d}  chebyshev / eigh: {runs['chebyshev']['seconds'] / runs['eigh']['seconds']:.3f}x wall,"
              f" {runs['chebyshev']['peak_rss_mb'] / runs['eigh']['peak_rss_mb']:.2f}x peak memory")
        r = runs["chebyshev"]
        print(f"   n = {n:6d}  conversion to (epsilon, delta): {r['conversion_s']:.2f} s wall,"
              f" {r['conversion_cpu_s']:.2f} s CPU (threads, each pair once) against one call over every pair:"
              f" {r['one_call_conversion_s']:.2f} s wall, {r['one_call_conversion_cpu_s']:.2f} s CPU:"
              f" {r['conversion_s'] / r['one_call_conversion_s']:.2f}x wall; max relative difference"
              f" {r['conversion_rel_difference']:.1e} (rho asymmetric by {r['asymmetry']:.1e})")
    print("1b. the same matrix streamed to a float64 file in blocks of rows (1 GiB budget), summaries in memory")
    for n in (2048,) + (STREAM_SIZES if options.full else ()):
        r = _child("stream", str(n))
        print(f"   n = {r['n']:6d}  T = {r['walk_steps']:5d}  {r['seconds']:8.2f} s wall  {r['cpu_s']:8.2f} s CPU"
              f"  peak RSS {r['peak_rss_mb']:6.0f} MB  file {r['file_gb']:.2f} GB  blocks of {r['block_rows']} rows"
              f"  epsilon rows vs (R1): {r['rows_rel_error']:.1e} relative")
    print("2. sources-only rows (k = 8) by the Chebyshev series")
    for n in (FULL_SIZE,) + ((SOURCES_SIZE,) if options.full else ()):
        r = _child("sources", str(n))
        print(f"   n = {r['n']:6d}  T = {r['walk_steps']:5d}  {r['seconds']:8.2f} s wall"
              f"  peak RSS {r['peak_rss_mb']:6.0f} MB  rows vs (R1): {r['rows_rel_error']:.1e} relative")
    r = naive_versus_vectorised()
    print(f"3. n = {r['n']}, CPU time: vectorised {r['vectorised_s']:.3f} s, naive per-pair loop {r['naive_s']:.2f} s: "
          f"{r['speedup']:.0f}x (max |difference| {r['max_abs_difference']:.2e})")
    r = walk_throughput()
    rates = r["steps_per_s"]
    print("4. random-walk DP-SGD steps per second (16 nodes, digits, logistic regression):")
    for name, rate in rates.items():
        print(f"   {name:5s} {rate:9.1f} steps/s   ({rates['local'] / rate:.1f}x slower than local)")
    print(f"   final token vs local, max |difference|: {r['max_token_difference_vs_local']}")


if __name__ == "__main__":
    main()
