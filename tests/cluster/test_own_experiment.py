"""Issue 42's acceptance test: a researcher's own experiment from nothing but their own files.

The test writes a Parquet table with a ``group`` column (one owner per group: natural partitions),
a package with a small `torch.nn.Module`, and a strategy plugin (a coordinate-wise trimmed mean,
declaring its cost and the clients it needs) installed as a distribution with an entry point in
``testbed.strategies``. One federated scenario names all three; it runs on the local engine and on
the session's 3-node emulated Ray cluster with the same numbers, and a local run killed with
SIGKILL after a checkpoint resumes to the numbers of the uninterrupted run.

Where each piece of user code runs:

- The strategy runs only in the driver: the testbed's round loop is the ServerApp in the driver
  process (`testbed.federated.server.RoundLoop`) and calls the strategy's ``configure_train`` and
  ``aggregate_train`` there; Flower's client actors on the cluster only train the model. So the
  plugin is installed where the driver runs (its folder on the driver's ``PYTHONPATH``), and the
  cluster's workers never import it.
- The model is built by every client actor, so every worker must import it. The user's code lives
  in a folder on the driver's ``PYTHONPATH`` that the cluster's nodes do not have on theirs: they
  were started at session start with the session's environment, as the nodes of a real cluster
  are started before the run on machines without the user's folder. (The emulated nodes share this
  machine's files, and Ray puts the driver's working directory on its workers' path, so the code
  is deliberately not in the working directory: that would hide a missing shipment.) The ``ray``
  engine ships the package to the workers as Ray's ``py_modules`` (`Engine.add_worker_code`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import yaml

from testbed.cluster import local as cluster_local
from testbed.faults import KILL_AFTER_RECORDS
from tests.cluster.test_cluster import _finish, _summary, _without_timings

MODEL = '''
"""The user's network."""
from torch import nn


class Tiny(nn.Module):
    def __init__(self, features, classes, width=8):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(features, width), nn.Tanh(), nn.Linear(width, classes))

    def forward(self, x):
        return self.layers(x)
'''

RULE = '''
"""The user's robust rule: per coordinate, the mean of the uploads without the f largest and f smallest."""
import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAvg

from testbed.federated.strategies import ByzantineCount, StrategyPlugin, flower_round_settings


class TrimmedMean(FedAvg):
    def __init__(self, trim, **kwargs):
        super().__init__(**kwargs)
        self.trim = trim

    def aggregate_train(self, server_round, replies):
        replies = [reply for reply in replies if not reply.has_error()]
        key = next(iter(replies[0].content.array_records))
        arrays = ArrayRecord()
        for name in replies[0].content[key]:
            ranked = np.sort(np.stack([reply.content[key][name].numpy() for reply in replies]), axis=0)
            kept = ranked[self.trim:len(replies) - self.trim]
            arrays[name] = Array(kept.mean(axis=0).astype(ranked.dtype))
        return arrays, None


class TrimmedMeanRule(StrategyPlugin):
    name = "trimmed_mean"
    summary = "coordinate-wise trimmed mean (a user's plugin)"
    Config = ByzantineCount
    cost = "O(n d log n) time (a sort per coordinate), O(n d) memory"

    @classmethod
    def build(cls, config, setup, f):
        return TrimmedMean(f, **flower_round_settings(setup))  # trains exactly the round's clients

    @classmethod
    def min_clients(cls, f):
        return 2 * f + 1
'''


def _write_table(path: Path, owners: int = 4, rows: int = 160) -> Path:
    """Three numeric features, an owner column ``group`` and a text label that depends on two features."""
    import pyarrow as pa
    from pyarrow import parquet

    rng = np.random.default_rng(7)
    x = rng.normal(size=(rows, 3))
    parquet.write_table(pa.table({
        "f1": x[:, 0], "f2": x[:, 1], "f3": x[:, 2],
        "group": [f"clinic-{i % owners}" for i in range(rows)],
        "label": np.where(x[:, 0] - x[:, 1] > 0, "sick", "well"),
    }), path)
    return path


def _write_user_code(code: Path) -> None:
    """The model package ``own_nets`` and the plugin distribution ``own-rules`` (module ``own_rules``)."""
    (code / "own_nets").mkdir(parents=True)
    (code / "own_nets" / "__init__.py").write_text("")
    (code / "own_nets" / "nets.py").write_text(MODEL)
    (code / "own_rules.py").write_text(RULE)
    info = code / "own_rules-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: own-rules\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[testbed.strategies]\ntrimmed_mean = own_rules:TrimmedMeanRule\n")


def _scenario(table: Path) -> dict:
    return {
        "name": "own-experiment", "kind": "federated", "seed": 3, "engine": {"type": "local", "num_cpus": 2},
        "data": {"dataset": "table", "path": str(table), "label": "label", "group": "group", "num_clients": 4,
                 "partition": {"type": "natural"}},
        "workload": {"name": "classifier", "model": "own_nets.nets:Tiny",
                     "model_args": {"features": 3, "classes": 2}, "batch_size": 8, "lr": 0.1},
        "federated": {"rounds": 3, "local_epochs": 2, "strategy": {"name": "trimmed_mean"},
                      "attack": {"name": "sign_flip", "fraction": 0.25}},
    }


def _testbed(work: Path, code: Path, *args: object, env_extra: dict | None = None) -> subprocess.Popen:
    """``testbed ARGS`` in the user's working folder, with their code folder on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CI": "1", "PYTHONPATH": path, **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "testbed.cli", *map(str, args)], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_own_data_model_and_rule_run_alike_on_local_and_a_cluster_and_resume_after_kill(tmp_path, emulated_cluster):
    work, user_code = tmp_path / "work", tmp_path / "code"
    work.mkdir()
    _write_user_code(user_code)
    (work / "mine.yaml").write_text(yaml.safe_dump(_scenario(_write_table(work / "visits.parquet"))))

    # Side by side: most of a tiny federated run is start-up, which two processes overlap.
    local_run = _testbed(work, user_code, "run", "mine.yaml", "--run-dir", tmp_path / "local", "--quiet")
    cluster_run = _testbed(work, user_code, "run", "mine.yaml", "--run-dir", tmp_path / "cluster", "--quiet", "--set",
                           f"engine={{type: ray, address: '{emulated_cluster['address']}'}}")
    for code, err in (_finish(local_run), _finish(cluster_run)):
        assert code == 0, err[-3000:]

    local, cluster = _summary(tmp_path / "local"), _summary(tmp_path / "cluster")
    # The session's cluster has its head (no CPUs) and two workers, or one once test_cluster.py's
    # node-kill test has run: the run used every node alive, so its tasks ran on worker nodes.
    alive = sum(n["alive"] for n in cluster_local.status()["nodes"])
    assert cluster["engine"]["nodes"] == alive >= 2 and local["engine"]["type"] == "local"
    rounds = _without_timings(tmp_path / "local")
    assert [r["round"] for r in rounds] == [1, 2, 3] and all(r["clients_trained"] == 4 for r in rounds)
    assert _without_timings(tmp_path / "cluster") == rounds
    assert cluster["final_metrics"] == local["final_metrics"]
    assert local["final_metrics"]["test_accuracy"] > 0.6  # the label is f1 > f2: well above chance

    # Killed after the second round's record (the first round's checkpoint is written), then resumed.
    code, err = _finish(_testbed(work, user_code, "run", "mine.yaml", "--run-dir", tmp_path / "killed", "--quiet",
                                 env_extra={KILL_AFTER_RECORDS: "2"}))
    assert code == -9, err[-3000:]
    assert not (tmp_path / "killed" / "summary.json").exists()
    assert any((tmp_path / "killed" / "checkpoints").iterdir())
    code, err = _finish(_testbed(work, user_code, "resume", tmp_path / "killed", "--quiet"))
    assert code == 0, err[-3000:]
    assert _without_timings(tmp_path / "killed") == rounds
    assert _summary(tmp_path / "killed")["final_metrics"] == local["final_metrics"]


def test_the_plugin_and_the_model_are_found_as_user_code(tmp_path):
    """The plugin is found through its entry point with its declarations, and the model outside
    site-packages, so the ray engine ships exactly the model's package folder."""
    user_code = tmp_path / "code"
    _write_user_code(user_code)
    probe = textwrap.dedent("""
        import json
        from testbed.federated.strategies import registered_strategies
        from testbed.workloads.usermodel import worker_code
        entry = registered_strategies()["trimmed_mean"]
        print(json.dumps([entry.min_clients(1), entry.cost, worker_code({"model": "own_nets.nets:Tiny"})]))
    """)
    path = os.pathsep.join(p for p in (str(user_code), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    min_clients, cost, shipped = json.loads(done.stdout)
    assert min_clients == 3 and cost.startswith("O(n d log n) time")
    assert shipped == [str((user_code / "own_nets").resolve())]


def test_the_ray_engine_ships_the_users_code_with_the_job_and_the_local_engine_needs_not(tmp_path):
    """What reaches ``ray.init``: the cluster's workers get the model's folder as ``py_modules``; the
    local engine's workers are this machine's processes and find it on the inherited PYTHONPATH."""
    from testbed.engines.config import LocalEngineConfig, RayEngineConfig
    from testbed.engines.registry import make_engine

    package = str(tmp_path / "own_nets")
    joined = make_engine(RayEngineConfig(type="ray", address="127.0.0.1:6379"), {"ray"}, 4, worker_code=[package])
    local = make_engine(LocalEngineConfig(), {"ray"}, 4, worker_code=[package])
    plain = make_engine(RayEngineConfig(type="ray", address="127.0.0.1:6379"), {"ray"}, 4)

    assert joined._init_args()["runtime_env"] == {"py_modules": [package]}
    assert "runtime_env" not in local._init_args() and "runtime_env" not in plain._init_args()
