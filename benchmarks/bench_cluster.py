"""A sweep of small variants on 1 vs 3 emulated nodes: wall ratio and scheduling overhead per variant.

Not a test: the numbers depend on the machine. One run starts `testbed cluster up --nodes 1`, runs
the sweep on it through the ``ray`` engine, stops it, and does the same on 3 nodes (each node with
``--cpus-per-node`` CPUs, so 3 nodes offer 3x the slots). It prints

- the sweep's wall time on each cluster and their ratio (1 node / 3 nodes; the ideal is 3, bounded
  by the machine's real cores: an emulated cluster shares them);
- the scheduling overhead per variant: on one node, where variants run one after another, the
  sweep's wall time minus the time the variants spent inside their runs (`summary.json` wall_s),
  per variant; split into the round trip of an empty Ray task (Ray's placement) and the start-up of
  a ``testbed`` process (interpreter, imports, scenario validation), the rest being the variant's
  report and the sweep's own set-up. On three nodes the same difference is shown per variant as
  slot-seconds outside runs, which also counts slots waiting for the machine's cores.

Each variant runs in its own process on the node its Ray task lands on, computing in-process
(``engine: {type: local, use_ray: never}`` per variant): a variant that asked the cluster for more
CPUs while its placement task holds one would wait forever on a full cluster.

    python benchmarks/bench_cluster.py [--variants 12] [--steps 40] [--cpus-per-node 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.cluster import local  # noqa: E402  (after the sys.path insert above, so this checkout is imported)


def sweep_scenario(variants: int, steps: int) -> dict:
    """A classifier sweep over ``variants`` seeds, placed by the ray engine, computed in-process."""
    return {
        "name": "bench-cluster", "kind": "workload", "seed": 0,
        "engine": {"type": "ray", "address": "auto"},
        "data": {"dataset": "digits", "test_fraction": 0.25},
        "workload": {"name": "classifier", "arch": "mlp", "hidden": 32, "batch_size": 32},
        "training": {"steps": steps, "eval_every": steps, "checkpoint_every": steps},
        "sweep": {"grid": {"seed": list(range(variants))},
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


def run_sweep(scenario_path: Path, run_dir: Path, address: str) -> tuple[float, list[float]]:
    """Wall seconds of the whole sweep, and each variant's in-run seconds."""
    env = {**os.environ, "CI": "1", "RAY_ADDRESS": address}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario_path), "--run-dir",
                           str(run_dir), "--quiet"], env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sweep failed:\n{done.stderr[-2000:]}")
    summaries = [json.loads(p.read_text()) for p in sorted((run_dir / "variants").glob("*/summary.json"))]
    return wall, [s["timings"]["wall_s"] for s in summaries]


def measure(nodes: int, cpus: int, scenario_path: Path, workdir: Path, variants: int) -> dict:
    state = local.up(nodes, cpus)
    try:
        wall, inside = run_sweep(scenario_path, workdir / f"sweep-{nodes}", state["address"])
        round_trip = ray_round_trip(state["address"], variants)
    finally:
        local.down()
    if len(inside) != variants:
        raise SystemExit(f"{nodes} node(s): {len(inside)} of {variants} variants completed")
    slots = nodes * cpus
    return {"nodes": nodes, "slots": slots, "wall_s": wall, "inside_s": sum(inside),
            "outside_per_variant_s": (wall * slots - sum(inside)) / variants, "ray_task_s": round_trip}


def process_start_up(scenario_path: Path) -> float:
    """Seconds to start ``testbed`` and validate one variant: what each variant's process pays first."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(scenario_path)], check=True,
                   capture_output=True, cwd=REPO, env={**os.environ, "CI": "1"})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", type=int, default=12)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cpus-per-node", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        workdir = Path(tmp)
        os.environ[local.STATE_DIR_ENV] = str(workdir / "cluster-state")
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # as the engines do: no warning
        scenario_path = workdir / "sweep.yaml"
        scenario_path.write_text(yaml.safe_dump(sweep_scenario(args.variants, args.steps), sort_keys=False))
        rows = [measure(n, args.cpus_per_node, scenario_path, workdir, args.variants) for n in (1, 3)]
        start_up = process_start_up(next((workdir / "sweep-1" / "variants").glob("*.yaml")))
    print(f"sweep of {args.variants} variants ({args.steps} classifier steps each) on emulated nodes of "
          f"{args.cpus_per_node} CPU(s); this machine has {os.cpu_count()} cores")
    print(f"{'nodes':>5} {'slots':>5} {'wall s':>8} {'in runs s':>9} "
          f"{'outside runs s/variant':>22} {'ray task ms':>11}")
    for row in rows:
        print(f"{row['nodes']:>5} {row['slots']:>5} {row['wall_s']:>8.1f} {row['inside_s']:>9.1f} "
              f"{row['outside_per_variant_s']:>22.2f} {row['ray_task_s'] * 1000:>11.2f}")
    serial = rows[0]
    print(f"wall ratio 1 node / 3 nodes: {serial['wall_s'] / rows[1]['wall_s']:.2f}x "
          f"(ideal {rows[1]['slots'] / serial['slots']:.0f}x, at most the cores this machine gives)")
    print(f"scheduling overhead per variant (1 node, serial): {serial['outside_per_variant_s']:.2f} s = "
          f"Ray task {serial['ray_task_s'] * 1000:.1f} ms + testbed process start-up {start_up:.2f} s "
          f"+ report and sweep set-up {serial['outside_per_variant_s'] - start_up - serial['ray_task_s']:.2f} s")


if __name__ == "__main__":
    main()
