"""A sweep of small variants on 1 vs 3 emulated nodes: per-variant overhead of warm (forked) variant
processes against fresh ones, the 1-node / 3-node wall ratio, and how the cost grows with variants.

Not a test: the numbers depend on the machine and on what else runs on it (the load averages are
printed, and ``--repeat`` keeps each sweep's fastest try). One run starts `testbed cluster up
--nodes 1`, runs sweeps on it through the ``ray`` engine, stops it, and does the same on 3 nodes
(each node with ``--cpus-per-node`` CPUs, so 3 nodes offer 3x the slots; each sweep runs
``parallel`` = slots variants at once). Every sweep runs its variants as warm processes (forked
from a warm server that imported torch and the rest once, `testbed.engines.warm`) unless marked
fresh (``sweep.processes: fresh``, a new interpreter per variant: the yardstick, and what every
sweep did before). It prints

- per sweep: wall time, the seconds spent inside the variants' runs (`summary.json` wall_s), the
  rest per variant (outside runs: start-up, the variant's report, the sweep's own set-up, over the
  slots), the wall time and the CPU seconds per variant (of the sweep's process, the placement
  hosts, the warm servers and the variants, read from /proc every 0.1 s: what the machine computed
  for the sweep, which other load changes far less than wall time), and how many warm servers
  the nodes started;
- the overhead per variant on one node (serial), warm against fresh: outside the runs, inside
  them (a fresh process imports there too), wall and CPU;
- the warm sweep at three sizes on one node, with the lines through them (fixed cost, and cost per
  variant, in wall and in CPU seconds);
- the wall ratio 1 node / 3 nodes, warm and fresh (the ideal is 3; an emulated cluster shares this
  machine's cores, so CPU-bound variants cannot go faster than the cores allow, and the sweep's
  fixed part does not shrink: the bound printed follows from the CPU fit).

Each variant runs in its own process on the node it is placed on, computing in-process
(``engine: {type: local, use_ray: never}`` per variant): a variant that asked the cluster for more
CPUs while its placement held one would wait forever on a full cluster.

    python benchmarks/bench_cluster.py [--variants 12] [--sizes 4 8] [--steps 40] [--cpus-per-node 1] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.cluster import local  # noqa: E402  (after the sys.path insert above, so this checkout is imported)

SERVER = "testbed.engines.warm_server"


def sweep_scenario(variants: int, steps: int, parallel: int, processes: str) -> dict:
    """A classifier sweep over ``variants`` seeds, placed by the ray engine, computed in-process."""
    return {
        "name": "bench-cluster", "kind": "workload", "seed": 0,
        "engine": {"type": "ray", "address": "auto"},
        "data": {"dataset": "digits", "test_fraction": 0.25},
        "workload": {"name": "classifier", "arch": "mlp", "hidden": 32, "batch_size": 32},
        "training": {"steps": steps, "eval_every": steps, "checkpoint_every": steps},
        "sweep": {"grid": {"seed": list(range(variants))}, "parallel": parallel, "processes": processes,
                  "variants": [{"engine": {"type": "local", "use_ray": "never"}}]},
    }


def _noop() -> None:
    return None


def ray_round_trip(address: str, tasks: int) -> float:
    """Seconds per empty task, mapped over the cluster in one batch after a warm-up batch."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)  # type: ignore[arg-type]  # ray takes names too
    try:
        remote = ray.remote(num_cpus=1)(_noop)
        ray.get([remote.remote() for _ in range(tasks)])
        started = time.perf_counter()
        ray.get([remote.remote() for _ in range(tasks)])
        return (time.perf_counter() - started) / tasks
    finally:
        ray.shutdown()


class Watcher(threading.Thread):
    """Watches the processes below the cluster's keeper while a sweep runs (every 0.1 s): counts
    the warm servers started (processes of the server module whose parent is not one: their
    children, the variants, share their command line), and keeps the CPU seconds last seen of the
    processes that do the sweep's work there: the placement hosts and the warm servers (their own),
    and the variant processes, warm or fresh (with what they reaped). Each process's last tenth of
    a second is missed, in both kinds of sweep alike."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.servers, self.done = root, set[int](), threading.Event()
        self.cpu: dict[tuple[int, float], float] = {}

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                tree = psutil.Process(self.root).children(recursive=True)
            except psutil.Error:
                continue
            warm: dict[int, tuple[int, tuple[int, float], Any]] = {}
            for process in tree:
                try:
                    command, times, key = " ".join(process.cmdline()), process.cpu_times(), (
                        process.pid, process.create_time())
                    if SERVER in command:
                        warm[process.pid] = (process.ppid(), key, times)
                    elif command.startswith("ray::PlacementHost"):
                        self.cpu[key] = times.user + times.system
                    elif "testbed.cli run" in command or "testbed.cli resume" in command:
                        self.cpu[key] = sum(times[:4])
                except psutil.Error:
                    continue
            for pid, (parent, key, times) in warm.items():
                if parent in warm:  # a variant forked from a server
                    self.cpu[key] = sum(times[:4])
                else:
                    self.servers.add(pid)
                    self.cpu[key] = times.user + times.system


def _reaped_cpu_seconds() -> float:
    """CPU seconds of the processes this one has reaped (the sweep's process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wait_for_servers(keeper: int, timeout_s: float = 60.0) -> None:
    """Wait until the sweep's warm servers have exited (they go with the placement hosts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not [p for p in psutil.Process(keeper).children(recursive=True) if SERVER in " ".join(p.cmdline())]:
                return
        except psutil.Error:
            pass
        time.sleep(0.2)
    raise SystemExit(f"warm servers still running {timeout_s:.0f} s after the sweep")


def run_sweep(scenario: dict, run_dir: Path, state: dict) -> dict:
    """Run one sweep on the cluster: wall seconds, each variant's in-run seconds, the CPU seconds
    of the sweep's process and of the cluster meanwhile, and the warm servers started."""
    scenario_path = run_dir.with_suffix(".yaml")
    scenario_path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    env = {**os.environ, "CI": "1", "RAY_ADDRESS": state["address"]}
    watcher = Watcher(state["keeper_pid"])
    watcher.start()
    reaped_before = _reaped_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario_path), "--run-dir",
                           str(run_dir), "--quiet"], env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    _wait_for_servers(state["keeper_pid"])
    watcher.done.set()
    watcher.join()
    cpu = _reaped_cpu_seconds() - reaped_before + sum(watcher.cpu.values())
    if done.returncode != 0:
        raise SystemExit(f"sweep failed:\n{done.stderr[-2000:]}")
    inside = [json.loads(p.read_text())["timings"]["wall_s"] for p in (run_dir / "variants").glob("*/summary.json")]
    variants = len(scenario["sweep"]["grid"]["seed"])
    if len(inside) != variants:
        raise SystemExit(f"{run_dir.name}: {len(inside)} of {variants} variants completed")
    return {"wall_s": wall, "inside_s": sum(inside), "cpu_s": cpu, "variants": variants,
            "servers": len(watcher.servers)}


def measure(nodes: int, cpus: int, plan: list[tuple[int, str]], steps: int, workdir: Path, repeat: int) -> list[dict]:
    """Start an emulated cluster of ``nodes`` and run the sweeps of ``plan`` ((variants, processes)),
    the whole plan ``repeat`` times over; of each sweep, the fastest try (the least disturbed by
    whatever else runs on the machine)."""
    slots = nodes * cpus
    state = local.up(nodes, cpus)
    best: dict[tuple[int, str], dict] = {}
    try:
        round_trip = ray_round_trip(state["address"], 12)
        for attempt in range(1, repeat + 1):
            for variants, processes in plan:
                run_dir = workdir / f"sweep-{nodes}n-{variants}-{processes}-{attempt}"
                row = run_sweep(sweep_scenario(variants, steps, slots, processes), run_dir, state)
                row.update(nodes=nodes, slots=slots, processes=processes, ray_task_s=round_trip, attempt=attempt,
                           outside_per_variant_s=(row["wall_s"] * slots - row["inside_s"]) / variants)
                print(_row_line(row), flush=True)
                if (variants, processes) not in best or row["wall_s"] < best[variants, processes]["wall_s"]:
                    best[variants, processes] = row
    finally:
        local.down()
    return list(best.values())


HEADER = (f"{'try':>3} {'nodes':>5} {'slots':>5} {'processes':>9} {'variants':>8} {'wall s':>7} {'in runs s':>9} "
          f"{'outside runs s/variant':>22} {'wall s/variant':>14} {'CPU s/variant':>13} {'warm servers':>12}")


def _row_line(row: dict) -> str:
    return (f"{row['attempt']:>3} {row['nodes']:>5} {row['slots']:>5} {row['processes']:>9} {row['variants']:>8} "
            f"{row['wall_s']:>7.1f} {row['inside_s']:>9.1f} {row['outside_per_variant_s']:>22.2f} "
            f"{row['wall_s'] / row['variants']:>14.2f} {row['cpu_s'] / row['variants']:>13.2f} {row['servers']:>12}")


def _line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope of wall seconds against variants."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y - slope * mean_x, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", type=int, default=12)
    parser.add_argument("--sizes", type=int, nargs="*", default=[4, 8],
                        help="smaller warm sweeps on one node, to see the growth (with --variants)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="tries of each sweep; the fastest counts")
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"sweeps of classifier variants ({args.steps} steps each) on emulated nodes of {args.cpus_per_node} CPU(s); "
          f"this machine has {os.cpu_count()} cores, load average {load_before[0]:.1f} (1 min) at the start")
    print(HEADER)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        workdir = Path(tmp)
        os.environ[local.STATE_DIR_ENV] = str(workdir / "cluster-state")
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # as the engines do: no warning
        n = args.variants
        one = measure(1, args.cpus_per_node, [(n, "warm"), (n, "fresh"), *((size, "warm") for size in args.sizes)],
                      args.steps, workdir, args.repeat)
        three = measure(3, args.cpus_per_node, [(n, "warm"), (n, "fresh")], args.steps, workdir, args.repeat)
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at the end; below, each sweep's fastest of "
          f"{args.repeat} tries")
    rows = {(row["nodes"], row["processes"], row["variants"]): row for row in one + three}
    warm, fresh = rows[1, "warm", n], rows[1, "fresh", n]
    print(f"per-variant overhead, 1 node (serial), outside the runs: warm {warm['outside_per_variant_s']:.2f} s "
          f"(target <= 2 s) vs fresh {fresh['outside_per_variant_s']:.2f} s; a Ray task's round trip is "
          f"{warm['ray_task_s'] * 1000:.1f} ms of it")
    print(f"  inside the runs: warm {warm['inside_s'] / n:.2f} s vs fresh {fresh['inside_s'] / n:.2f} s per variant "
          "(a fresh process also imports during its run: scikit-learn's datasets, torch's compiler stack)")
    print(f"  wall per variant: warm {warm['wall_s'] / n:.2f} s vs fresh {fresh['wall_s'] / n:.2f} s "
          f"({fresh['wall_s'] / warm['wall_s']:.2f}x); CPU per variant: "
          f"warm {warm['cpu_s'] / n:.2f} s vs fresh {fresh['cpu_s'] / n:.2f} s ({fresh['cpu_s'] / warm['cpu_s']:.2f}x)")
    sizes = sorted((row for row in one if row["processes"] == "warm"), key=lambda row: row["variants"])
    model = None
    if len(sizes) >= 2:
        wall_fixed, wall_slope = _line([(row["variants"], row["wall_s"]) for row in sizes])
        cpu_fixed, cpu_slope = _line([(row["variants"], row["cpu_s"]) for row in sizes])
        model = cpu_fixed, cpu_slope
        print("growth, warm, 1 node: " + ", ".join(f"{row['variants']} variants {row['wall_s']:.1f} s "
                                                    f"({row['cpu_s']:.1f} CPU s)" for row in sizes))
        print(f"  fit: wall {wall_fixed:.1f} s + {wall_slope:.2f} s per variant; "
              f"CPU {cpu_fixed:.1f} s + {cpu_slope:.2f} s per variant")
    cores = os.cpu_count() or 1
    for processes in ("warm", "fresh"):
        serial, spread = rows[1, processes, n], rows[3, processes, n]
        line = (f"wall ratio 1 node / 3 nodes, {processes}: {serial['wall_s'] / spread['wall_s']:.2f}x "
                f"(target >= 2.5x for warm; ideal {spread['slots'] // serial['slots']}x)")
        if processes == "warm" and model is not None:
            # Amdahl, from the CPU fit: the fixed part stays serial, the variants share min(slots, cores).
            fixed, per_variant = model
            bound = (fixed + n * per_variant) / (fixed + n * per_variant / min(spread["slots"], cores))
            line += f"; at most {bound:.2f}x on {cores} idle cores with {fixed:.1f} CPU s fixed"
        print(line)


if __name__ == "__main__":
    main()
