#!/usr/bin/env bash
# A short smoke test of the device each scenario kind trains on (issue 39, item 6).
#
#   scripts/device_check.sh            # CUDA where present, else the CPU
#   scripts/device_check.sh cpu        # force one device: auto | cpu | cuda | cuda:N
#   PYTHON=/path/to/python scripts/device_check.sh
#
# Runs the workload kind (the classifier on digits, a few steps, in this process), the federated kind
# (4 Flower clients, 1 round) and the pretraining kind (DeepSpeed, 2 steps, 1 rank) at tiny sizes with
# `device: <DEVICE>`, and checks for each that the run's summary.json records that device, that every
# final metric is a finite number, and (workload kind, on CUDA) that CUDA memory was used in this
# process; prints each kind's wall time. Exits 0 when every kind passes, 1 otherwise. On a machine
# without CUDA the CPU run must pass, and the script says the CUDA part is unverified.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$PYTHON" - "${1:-}" <<'PY'
"""The device check's body: one tiny run per kind, checked from its run folder."""

import contextlib
import io
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from testbed.cli import main as testbed

CUDA = torch.cuda.is_available()
DEVICE = sys.argv[1] or ("cuda" if CUDA else "cpu")
TINY = {
    "workload": {
        "name": "device-check-workload", "kind": "workload", "seed": 1,
        "engine": {"type": "local", "use_ray": "never"},  # in this process, where CUDA memory can be read
        "data": {"dataset": "digits", "test_fraction": 0.25},
        "workload": {"name": "classifier", "arch": "cnn", "hidden": 16, "batch_size": 32},
        "training": {"steps": 6, "eval_every": 3, "checkpoint_every": 3},
    },
    "federated": {
        "name": "device-check-federated", "kind": "federated", "seed": 1,
        "engine": {"type": "local", "num_cpus": 2},
        "data": {"dataset": "digits", "num_clients": 4, "partition": {"type": "dirichlet", "beta": 0.5}},
        "workload": {"name": "classifier", "arch": "cnn", "hidden": 16},
        "federated": {"rounds": 1, "local_epochs": 1, "strategy": {"name": "fedavg"}},
    },
    "pretrain": {
        "name": "device-check-pretrain", "kind": "pretrain", "seed": 1,
        "engine": {"type": "local"},
        "pretrain": {
            "corpus": {"source": "factrecall", "max_documents": None, "heldout_fraction": 0.1,
                       "factrecall": {"documents": 120, "max_filler": 4, "eval_documents": 4}},
            "tokenizer": {"vocab_size": 320, "train_documents": 100},
            "context_length": 64, "model": {"layers": 1, "d_model": 32, "heads": 2},
            "steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "eval_documents": 4,
        },
    },
}


def run_kind(kind: str, work: Path) -> tuple[list[str], float]:
    """Run ``kind``'s tiny scenario on DEVICE; the problems found (none: it passed) and its wall time."""
    path = work / f"{kind}.yaml"
    path.write_text(yaml.safe_dump({**TINY[kind], "device": DEVICE}, sort_keys=False))
    run_dir = work / kind
    started = time.perf_counter()
    if kind == "workload":
        if CUDA:
            torch.cuda.reset_peak_memory_stats()
        errors = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):  # the report's path
            code = testbed(["run", str(path), "--run-dir", str(run_dir), "--quiet"])
        error = (errors.getvalue().strip().splitlines() or [""])[-1]
    else:  # Flower's simulation and DeepSpeed's ranks: a process of their own
        done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(run_dir),
                               "--quiet"], check=False, capture_output=True, text=True)
        code, error = done.returncode, (done.stderr.strip().splitlines() or [""])[-1]
    wall = time.perf_counter() - started
    if code != 0:
        return [f"exit code {code} {error}".strip()], wall
    summary = json.loads((run_dir / "summary.json").read_text())
    problems = []
    if summary.get("device") != DEVICE and not (DEVICE == "auto" and summary.get("device")):
        problems.append(f"ran on {summary.get('device')!r}, not {DEVICE!r}")
    numbers = {k: v for k, v in summary["final_metrics"].items() if isinstance(v, (int, float))}
    if not numbers:
        problems.append("no final metric")
    problems += [f"{k} = {v}" for k, v in numbers.items() if not math.isfinite(v)]
    if kind == "workload" and summary.get("device", "").startswith("cuda") and torch.cuda.max_memory_allocated() == 0:
        problems.append("no CUDA memory was allocated: the tensors stayed on the CPU")
    return problems, wall


def main() -> int:
    print(f"device check: device {DEVICE}; torch {torch.__version__}; "
          + (f"GPU: {torch.cuda.get_device_name(0)}" if CUDA else "GPU: not present, CUDA part unverified"))
    failed = 0
    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        for kind in TINY:
            problems, wall = run_kind(kind, Path(tmp))
            failed += bool(problems)
            print(f"  {kind:<10} {'ok' if not problems else 'FAILED: ' + '; '.join(problems)}  ({wall:.1f} s)")
    print("device check: " + ("passed" if not failed else f"{failed} kind(s) failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
PY
