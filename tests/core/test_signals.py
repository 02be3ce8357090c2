"""Ctrl-C on a run of each kind: exit 130 within seconds, nothing left running, a resumable folder.

Each test starts ``testbed run`` as a child process at a size long enough to be interrupted, waits
for its first metrics record, sends SIGINT to that process alone (the harder case: a terminal's
Ctrl-C also reaches the children in its process group), and checks the exit code, the stderr line
and that no process of the run's tree (Ray's GCS, raylet, agents and workers; mpiexec and its
ranks; the deepspeed launcher and its ranks) is alive 10 s after the signal. Then ``testbed resume``
finishes the folder. To keep the file short, the resumed run is first cut to a smaller size by
editing its config.yaml (the remaining rounds or steps); the workload kind's is then compared with
an uninterrupted run of that size (its numbers do not depend on the total step count).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

EXIT_WITHIN_S = 10.0
FIRST_RECORD_WITHIN_S = 300.0

WORKLOAD = {
    "name": "sig-workload", "kind": "workload", "seed": 3, "engine": {"type": "local"},
    "data": {"dataset": "digits", "test_fraction": 0.25},
    "workload": {"name": "classifier", "arch": "cnn", "hidden": 16, "batch_size": 32},
    "training": {"steps": 5000, "eval_every": 50, "checkpoint_every": 100},
}
FEDERATED = {
    "name": "sig-federated", "kind": "federated", "seed": 5, "engine": {"type": "local", "num_cpus": 1},
    "data": {"dataset": "digits", "num_clients": 4, "partition": {"type": "dirichlet", "beta": 0.5}},
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 16},
    "federated": {"rounds": 100, "local_epochs": 1, "strategy": {"name": "fedavg"}},
    "report": {"kind": "robustness"},
}
DECENTRALIZED = {
    "name": "sig-decentralized", "kind": "decentralized", "seed": 3, "engine": {"type": "mpi", "num_procs": 2},
    "data": {"dataset": "breast_cancer", "num_clients": 8},
    "decentralized": {
        "algorithm": ["random_walk"], "topology": {"name": "hypercube", "dim": 3}, "sigma": 1.0, "lr": 0.2,
        "random_walk": {"steps": 4000, "eval_every": 20, "checkpoint_every": 20},
        "audit": {"canaries": 0}, "comparison": {"enabled": False},
    },
    "report": {"kind": "privacy"},
}
PRETRAIN = {
    "name": "sig-pretrain", "kind": "pretrain", "seed": 2, "engine": {"type": "deepspeed", "num_procs": 2},
    "pretrain": {
        "corpus": {"source": "factrecall", "max_documents": None, "heldout_fraction": 0.1,
                   "factrecall": {"documents": 240, "max_filler": 4, "eval_documents": 6}},
        "tokenizer": {"vocab_size": 320, "train_documents": 200},
        "context_length": 96,
        "model": {"layers": 1, "d_model": 32, "heads": 2},
        "steps": 400, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "eval_documents": 8,
    },
    "report": {"kind": "pretraining"},
}


def _env() -> dict[str, str]:
    return {**os.environ, "CI": "1"}


def _testbed(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *map(str, args)], env=_env(),
                          capture_output=True, text=True, timeout=600)


def _write(tmp_path: Path, scenario: dict) -> Path:
    path = tmp_path / f"{scenario['name']}.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _alive(processes: list) -> list:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


def _default_sigint() -> None:
    """SIGINT as a terminal gives it. A suite started in the background of a non-interactive shell
    (``make test &``) inherits SIGINT ignored, which its children would inherit, and a run rightly
    leaves an ignored SIGINT ignored (`testbed.interrupts`): then no run here could be interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(scenario_path: Path, run_dir: Path) -> tuple[float, list[str]]:
    """Run ``testbed run`` until its first metrics record, SIGINT it, and check how it ends.

    Returns how long it took to exit, and what its process tree was just before the signal."""
    child = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(scenario_path), "--run-dir",
                              str(run_dir), "--quiet"], env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + FIRST_RECORD_WITHIN_S
        metrics = run_dir / "metrics.jsonl"
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 1):
            assert child.poll() is None, f"the run ended before its first record: {child.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, "no metrics record in time"
            time.sleep(0.1)
        parent = psutil.Process(child.pid)
        tree = [parent, *parent.children(recursive=True)]
        names = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in tree]
        assert child.poll() is None, "the run ended before it could be interrupted: make it longer"
        signalled = time.monotonic()
        child.send_signal(signal.SIGINT)
        try:
            _, err = child.communicate(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {EXIT_WITHIN_S} s after SIGINT; its tree was {names}")
        exit_s = time.monotonic() - signalled
        assert child.returncode == 130, err[-3000:]
        assert f"interrupted: 'testbed resume {run_dir}' continues from the last checkpoint" in err, err[-3000:]
        while _alive(tree) and time.monotonic() < signalled + EXIT_WITHIN_S:
            time.sleep(0.1)
        left = [f"{p.pid} {p.name()}" for p in _alive(tree)]
        assert not left, f"still alive {EXIT_WITHIN_S} s after SIGINT: {left} (tree: {names})"
        assert not (run_dir / "summary.json").exists()
        print(f"{scenario_path.stem}: exit 130 {exit_s:.1f} s after SIGINT, {len(tree)} processes stopped")
        return exit_s, names
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def _shorten(run_dir: Path, edit) -> None:
    """Cut the interrupted run's remaining size, as if it had been started smaller."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    edit(config, max((int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("ckpt-*.pt")), default=0))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def _resume(run_dir: Path) -> dict:
    """``testbed resume`` to the end; no process it started (Ray, Flower's actors, mpiexec and its
    ranks, the DeepSpeed launcher and its ranks) may outlive it."""
    child = subprocess.Popen([sys.executable, "-m", "testbed.cli", "resume", str(run_dir), "--quiet"], env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent, seen = psutil.Process(child.pid), {}
    while child.poll() is None:  # every descendant ever seen, also those that later detach
        try:
            seen.update({p.pid: p for p in parent.children(recursive=True)})
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    err = child.communicate(timeout=600)[1]
    assert child.returncode == 0, err[-3000:]
    ended = time.monotonic()
    while _alive(list(seen.values())) and time.monotonic() < ended + EXIT_WITHIN_S:
        time.sleep(0.1)
    left = [f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in _alive(list(seen.values()))]
    assert not left, f"still alive {EXIT_WITHIN_S} s after the resumed run ended: {left}"
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.integration
def test_workload_interrupted_then_resumed_matches_an_uninterrupted_run(tmp_path):
    path = _write(tmp_path, WORKLOAD)
    _interrupt(path, tmp_path / "run")
    size: list[int] = []

    def two_more_chunks(config: dict, checkpointed: int) -> None:
        size.append(checkpointed + 200)
        config["training"]["steps"] = size[0]
    _shorten(tmp_path / "run", two_more_chunks)
    summary = _resume(tmp_path / "run")

    reference = _testbed("run", path, "--run-dir", tmp_path / "reference", "--quiet", "--set",
                         f"training.steps={size[0]}")
    assert reference.returncode == 0, reference.stderr
    expected = json.loads((tmp_path / "reference" / "summary.json").read_text())
    assert summary["final_metrics"] == expected["final_metrics"]
    assert _records(tmp_path / "run") == _records(tmp_path / "reference")


@pytest.mark.integration
def test_federated_interrupted_stops_flower_and_ray_then_resumes(tmp_path):
    run_dir = tmp_path / "run"
    _, tree = _interrupt(_write(tmp_path, FEDERATED), run_dir)
    assert any("raylet" in p for p in tree) and any("ClientAppActor" in p for p in tree), tree
    # Only whole rounds were recorded: the round in flight when the signal came was dropped.
    assert all(r["clients_trained"] == 4 for r in _records(run_dir))

    def two_more_rounds(config: dict, checkpointed: int) -> None:
        config["federated"]["rounds"] = checkpointed + 2
    _shorten(run_dir, two_more_rounds)
    summary = _resume(run_dir)
    rounds = [r["round"] for r in _records(run_dir)]
    assert rounds == list(range(1, rounds[-1] + 1)) and summary["status"] == "completed"


@pytest.mark.integration
def test_decentralized_on_mpi_interrupted_stops_mpiexec_and_its_ranks_then_resumes(tmp_path):
    run_dir = tmp_path / "run"
    _, tree = _interrupt(_write(tmp_path, DECENTRALIZED), run_dir)
    ranks = [p for p in tree if "-m testbed.engines.mpi_worker" in p and "mpiexec" not in p]
    assert any("mpiexec" in p for p in tree) and len(ranks) == 2, tree

    def forty_steps(config: dict, checkpointed: int) -> None:
        config["decentralized"]["random_walk"]["steps"] = 40
    _shorten(run_dir, forty_steps)
    summary = _resume(run_dir)
    assert "random_walk.test_accuracy" in summary["final_metrics"]


@pytest.mark.integration
def test_pretrain_on_deepspeed_interrupted_stops_the_launcher_and_its_ranks_then_resumes(tmp_path):
    run_dir = tmp_path / "run"
    _, tree = _interrupt(_write(tmp_path, PRETRAIN), run_dir)
    ranks = [p for p in tree if "-m testbed.pretrain.ds_worker" in p]
    assert any("deepspeed.launcher" in p for p in tree) and len(ranks) == 2, tree

    def two_more_steps(config: dict, checkpointed: int) -> None:
        config["pretrain"]["steps"] = checkpointed + 2
    _shorten(run_dir, two_more_steps)
    summary = _resume(run_dir)
    assert _records(run_dir)[-1]["step"] == yaml.safe_load((run_dir / "config.yaml").read_text())["pretrain"]["steps"]
    assert "tokens_per_s_per_process" not in summary["final_metrics"]
    assert summary["timings"]["tokens_per_s_per_process"] > 0
