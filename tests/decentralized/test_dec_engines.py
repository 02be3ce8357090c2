"""The same scenario and seed give the same model on every engine: nodes vectorised in-process,
as Ray actors, and as MPI ranks under ``mpiexec -n 2`` (started by the run itself)."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

MPIEXEC = Path(sys.executable).parent / "mpiexec"


def _run(cli, tmp_path: Path, scenario: dict, name: str, engine: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**scenario, "engine": engine}))
    code, _, err = cli("run", path, "--run-dir", tmp_path / name, "--quiet")
    assert code == 0, err
    return tmp_path / name


def _assert_same_run(run: Path, reference: Path) -> None:
    ours = json.loads((run / "summary.json").read_text())["final_metrics"]
    theirs = json.loads((reference / "summary.json").read_text())["final_metrics"]
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    records = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (run, reference)]
    assert [r["step"] for r in records[0]] == [r["step"] for r in records[1]]
    for mine, other in zip(*records):
        for key, value in other.items():
            assert mine[key] == (pytest.approx(value, rel=1e-4, abs=1e-6) if isinstance(value, float) else value)
    with np.load(run / "artifacts.npz") as a, np.load(reference / "artifacts.npz") as b:
        np.testing.assert_allclose(a["random_walk.pairwise_epsilon"], b["random_walk.pairwise_epsilon"], rtol=1e-12)
        for algorithm in ("random_walk", "gossip", "local_dp"):
            np.testing.assert_allclose(a[f"{algorithm}.audit_lower"], b[f"{algorithm}.audit_lower"], atol=1e-6)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """The in-process run both other engines are compared with (run once for the module)."""
    from testbed.cli import main
    from tests.decentralized.conftest import TINY

    folder = tmp_path_factory.mktemp("reference")
    path = folder / "local.yaml"
    path.write_text(yaml.safe_dump({**TINY, "engine": {"type": "local"}}))
    assert main(["run", str(path), "--run-dir", str(folder / "local"), "--quiet"]) == 0
    return folder / "local"


@pytest.mark.integration
def test_ray_actors_give_the_vectorised_model(cli, tmp_path, tiny_scenario, reference_run):
    run = _run(cli, tmp_path, tiny_scenario, "ray", {"type": "local", "use_ray": "always", "num_cpus": 2})

    assert json.loads((run / "summary.json").read_text())["engine"]["type"] == "local"
    _assert_same_run(run, reference_run)


@pytest.mark.integration
@pytest.mark.skipif(not MPIEXEC.is_file() and shutil.which("mpiexec") is None, reason="mpiexec not installed")
def test_mpi_ranks_give_the_vectorised_model(cli, tmp_path, tiny_scenario, reference_run):
    run = _run(cli, tmp_path, tiny_scenario, "mpi", {"type": "mpi", "num_procs": 2})

    assert json.loads((run / "summary.json").read_text())["engine"]["type"] == "mpi"
    _assert_same_run(run, reference_run)


class _OneRank:
    """A communicator of one rank with mpi4py's interface: what `Engine.spmd` hands each rank."""

    rank, size = 0, 1

    def allgather(self, value):
        return [value]

    def gather(self, value, root=0):
        return [value]


@pytest.mark.parametrize("algorithm", ["random_walk", "gossip", "local_dp"])
def test_the_spmd_nodes_need_only_the_communicator_they_are_given(tiny_scenario, algorithm):
    """The SPMD path runs on any communicator: on one rank it computes what the vectorised path does."""
    import torch

    from testbed.decentralized.backends import local_chunk, prepared
    from testbed.decentralized.phase import PhaseArgs
    from testbed.decentralized.spmd_nodes import spmd_chunk
    from testbed.decentralized.steps import initial_state
    from testbed.scenario import Scenario

    data = Scenario.model_validate(tiny_scenario).model_dump(mode="json")
    args = PhaseArgs(algorithm, 0.2, 1.0, 6, 6, 3)
    problem, phase, _ = prepared(data, args)
    spmd_state, spmd_records = spmd_chunk(_OneRank(), data, args, initial_state(problem, phase), 0, 6)
    local_state, local_records = local_chunk(data, args, initial_state(problem, phase), 0, 6)
    assert spmd_records == local_records
    for key, value in local_state.items():
        assert torch.equal(spmd_state[key], value), key
