"""A user's own `torch.nn.Module`, named as ``workload.model: "package.module:Class"``: validate builds
and runs it and reports its parameter count; it trains in the workload kind (resuming bit-exactly,
the same numbers twice) and in a federated run, whose Ray workers import it from the folder the
driver found it in. The malformed cases (no module, not a module, a constructor or forward error)
are in tests/data/test_user_data_bad_input.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.loading import validate_raw
from testbed.workloads.runner import build_workload
from tests.data.user_files import write_table
from tests.workloads.helpers import resumed_and_uninterrupted

NETS = '''
from torch import nn


class TwoLayer(nn.Module):
    """A user's network: features -> width -> classes."""

    def __init__(self, features, classes, width=16):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(features, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x):
        return self.layers(x)
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """A package ``my_nets_<test>`` in the test's folder, importable as the user's code would be."""
    name = f"my_nets_{abs(hash(tmp_path.name)) % 10**8}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "nets.py").write_text(NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the model's folder is added to it
    return name


def _scenario(package: str, width: int = 16, seed: int = 0) -> dict:
    return {"name": "mine", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
            "workload": {"name": "classifier", "model": f"{package}.nets:TwoLayer",
                         "model_args": {"features": 64, "classes": 10, "width": width}, "batch_size": 16},
            "training": {"steps": 30, "eval_every": 10}}


def test_validate_builds_the_model_and_reports_its_parameter_count(cli, tmp_path, user_package):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(_scenario(user_package, width=12)))
    code, out, err = cli("validate", path)
    assert code == 0, err
    expected = (64 * 12 + 12) + (12 * 10 + 10)  # two Linear layers: weights and biases
    assert out.strip() == f"{path}: ok (workload.model {user_package}.nets:TwoLayer: {expected:,} parameters)"


def test_the_user_model_trains_in_the_workload_kind(cli, tmp_path, user_package):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(_scenario(user_package)))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [10, 20, 30]
    assert records[-1]["test_accuracy"] > 0.5  # digits, 30 steps of a 16-unit network: well above 10% chance


def test_the_user_model_resumes_bit_exactly_and_repeats_its_numbers(user_package):
    make = lambda: build_workload(validate_raw(_scenario(user_package), "s.yaml"))
    restored, straight = resumed_and_uninterrupted(make, split_at=7, total=15)
    assert restored.evaluate() == straight.evaluate()
    again = make()
    again.train(15)
    assert again.evaluate() == straight.evaluate()


@pytest.mark.integration
def test_a_federated_run_with_the_users_model_on_a_table_with_natural_partitions(tmp_path):
    # A fresh interpreter in the user's folder, with nothing on PYTHONPATH: the driver imports the
    # package from the working directory and hands its folder to the Ray workers it starts.
    (tmp_path / "fed_nets").mkdir()
    (tmp_path / "fed_nets" / "__init__.py").write_text("")
    (tmp_path / "fed_nets" / "nets.py").write_text(NETS)
    table = write_table(tmp_path / "patients.parquet", rows=200, owners=4)
    scenario = {
        "name": "fed-mine", "kind": "federated", "seed": 4, "engine": {"type": "local", "num_cpus": 1},
        "data": {"dataset": "table", "path": str(table), "label": "outcome", "categorical": ["color"],
                 "group": "site", "num_clients": 4, "partition": {"type": "natural"}},
        "workload": {"name": "classifier", "model": "fed_nets.nets:TwoLayer",
                     "model_args": {"features": 5, "classes": 2, "width": 8}},
        "federated": {"rounds": 3, "local_epochs": 2, "strategy": {"name": "fedavg"}},
    }
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"CI": "1"}
    # The console script, not `python -m` (which would put the working directory on the path itself).
    testbed = Path(sys.executable).with_name("testbed")
    done = subprocess.run([str(testbed), "run", "scenario.yaml", "--run-dir", "run", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if "round" in line]
    assert [r["round"] for r in rounds][-1] == 3 and all(r["clients_trained"] == 4 for r in rounds)
    assert rounds[-1]["test_accuracy"] > 0.6  # the label is a + (color == red) > 0.3


def test_a_model_built_twice_from_the_same_seed_has_the_same_weights(user_package):
    first = build_workload(validate_raw(_scenario(user_package, seed=5), "s.yaml")).model.state_dict()
    second = build_workload(validate_raw(_scenario(user_package, seed=5), "s.yaml")).model.state_dict()
    other = build_workload(validate_raw(_scenario(user_package, seed=6), "s.yaml")).model.state_dict()
    assert all((first[k] == second[k]).all() for k in first)
    assert not all((first[k] == other[k]).all() for k in first)


@pytest.mark.integration
def test_a_process_started_after_the_import_finds_the_model_by_name(tmp_path, user_package):
    # Ray adds the driver's working directory to its workers' path; a model found anywhere else on the
    # driver's path (here: a folder only this process has on sys.path) reaches them through PYTHONPATH.
    from testbed.workloads.usermodel import model_class

    model_class(f"{user_package}.nets:TwoLayer")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-c", f"import {user_package}.nets"], cwd=elsewhere, env=dict(os.environ),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
