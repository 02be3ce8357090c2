"""Run every scenario under ``scenarios/`` at a test size and collect its summary.json metrics.

Used to show that a refactor changes no number: run it before and after, on ``local`` and on a
Ray cluster (``--engine ADDRESS``), and compare the two JSON files with ``--compare A B``::

    python scripts/scenario_summaries.py --out before.json
    python scripts/scenario_summaries.py --out after.json
    testbed cluster up --nodes 3 --cpus-per-node 1     # prints the cluster's address
    python scripts/scenario_summaries.py --engine ADDRESS --out after-ray.json
    python scripts/scenario_summaries.py --compare before.json after.json

Timings (keys ending in ``_s``, throughput) vary between runs and are left out.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

TEST_SIZE = {
    "workload": ["training.steps=4", "training.eval_every=2", "training.checkpoint_every=2"],
    "federated": ["federated.rounds=2"],
    "decentralized": ["decentralized.steps=4", "decentralized.eval_every=2", "decentralized.checkpoint_every=2",
                      "decentralized.random_walk.steps=16", "decentralized.random_walk.eval_every=8",
                      "decentralized.random_walk.checkpoint_every=8"],
    "pretrain": ["pretrain.steps=4", "pretrain.eval_every=2", "pretrain.checkpoint_every=2",
                 "pretrain.warmup_steps=1", "pretrain.eval_documents=4", "pretrain.tokenizer.train_documents=50",
                 "pretrain.tokenizer.vocab_size=512"],
}
PER_FILE = {
    "decentralized/fig1_full.yaml": ["decentralized.topology={name: hypercube, dim: 4}",
                                     "decentralized.comparison.topologies=[{name: hypercube, dim: 4}, "
                                     "{name: erdos_renyi, n: 16}, {name: grid, rows: 4, cols: 4}]"],
    "decentralized/fig1_miniature.yaml": [],
    "pretrain/cluster-deepspeed.yaml": ["engine.hostfile=null", "pretrain.context_length=128",
                                        "pretrain.model={layers: 2, d_model: 64, heads: 4}", "pretrain.batch_size=4",
                                        "pretrain.corpus.max_documents=80"],
    "pretrain/factrecall.yaml": ["pretrain.corpus.factrecall.documents=120",
                                 "pretrain.corpus.factrecall.eval_documents=10"],
    "pretrain/packing-comparison.yaml": ["pretrain.corpus.max_documents=80"],
    "pretrain/outeffhop-opt.yaml": ["pretrain.corpus.max_documents=80", "pretrain.outliers.calibration_batches=1"],
    "pretrain/outeffhop-bert.yaml": ["pretrain.corpus.max_documents=80", "pretrain.outliers.calibration_batches=1"],
    "pretrain/outeffhop-vit.yaml": ["pretrain.outliers.calibration_batches=1"],
}
RAY_KINDS = ("workload", "federated", "decentralized")


def scenario_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.yaml"))


def overrides(path: Path, root: Path, engine: str) -> list[str]:
    kind = yaml.safe_load(path.read_text())["kind"]
    sets = TEST_SIZE[kind] + PER_FILE.get(str(path.relative_to(root)), [])
    if engine != "local":
        sets = sets + [f"engine={{type: ray, address: '{engine}'}}"]
    return sets


def run_one(path: Path, root: Path, engine: str, work: Path) -> dict:
    run_dir = work / str(path.relative_to(root)).replace("/", "__").removesuffix(".yaml")
    command = [sys.executable, "-m", "testbed.cli", "run", str(path), "--no-sweep", "--quiet",
               "--run-dir", str(run_dir)]
    for item in overrides(path, root, engine):
        command += ["--set", item]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        return {"status": "failed", "exit_code": done.returncode, "wall_s": wall,
                "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = {k: v for k, v in summary["final_metrics"].items() if not _is_timing(k)}
    return {"status": "completed", "wall_s": wall, "final_metrics": metrics}


def _is_timing(key: str) -> bool:
    return key.endswith("_s") or "throughput" in key or "per_s" in key or "seconds" in key


def compare(a: dict, b: dict, rel: float) -> int:
    bad = 0
    for name in sorted(set(a) | set(b)):
        left, right = a.get(name, {}), b.get(name, {})
        if left.get("status") != "completed" or right.get("status") != "completed":
            print(f"{name}: {left.get('status')} vs {right.get('status')}")
            bad += left.get("status") != right.get("status")
            continue
        diffs = [k for k in set(left["final_metrics"]) | set(right["final_metrics"])
                 if not _close(left["final_metrics"].get(k), right["final_metrics"].get(k), rel)]
        print(f"{name}: {'identical' if not diffs else 'DIFFERS in ' + ', '.join(sorted(diffs))}")
        bad += bool(diffs)
    return bad


def _close(x, y, rel: float) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        if math.isnan(x) and math.isnan(y):
            return True
        return x == y or abs(x - y) <= rel * max(abs(x), abs(y))
    return x == y


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--engine", default="local",
                        help="local, or the address of a Ray cluster to run the kinds that support one on")
    parser.add_argument("--only", nargs="*", default=None, help="substrings of the files to run")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--compare", nargs=2, type=Path)
    parser.add_argument("--rel", type=float, default=0.0, help="relative tolerance of --compare (default: exact)")
    args = parser.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        return 1 if compare(a, b, args.rel) else 0
    root = Path("scenarios")
    files = [p for p in scenario_files(root) if args.only is None or any(s in str(p) for s in args.only)]
    if args.engine != "local":
        files = [p for p in files if yaml.safe_load(p.read_text())["kind"] in RAY_KINDS]
    with tempfile.TemporaryDirectory() as work, ThreadPoolExecutor(args.parallel) as pool:
        results = dict(zip((str(p.relative_to(root)) for p in files),
                           pool.map(lambda p: run_one(p, root, args.engine, Path(work)), files)))
    for name, result in results.items():
        print(f"{name}: {result['status']} in {result['wall_s']} s {result.get('error', '')}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
