"""``sweep.processes: shared`` (`testbed.sweep_shared`): a slot's variants run one after another in
one process on one Ray, and give what a process per variant gives; a variant that fails leaves the
slot going, one that kills the process takes the slot's later variants with it, recorded failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.faults import KILL_AFTER_RECORDS
from testbed.sweep_shared import refusal, slots
from tests.decentralized.conftest import TINY as DECENTRALIZED
from tests.federated.test_federated_runs import FEDERATED
from tests.processes import cli_process
from tests.sweeps.test_warm_variants import SWEEP as WORKLOAD_SWEEP
from tests.sweeps.test_warm_variants import _final_metrics, _watched_sweep

SWEEP = {**FEDERATED, "name": "fed-shared", "federated": {**FEDERATED["federated"], "rounds": 2},
         "sweep": {"grid": {"federated.strategy.name": ["fedavg", "dnc"], "seed": [1]}, "parallel": 1}}


def _summaries(sweep_dir: Path) -> dict[str, dict]:
    """Each variant's summary.json without what differs between any two runs (timings, provenance)."""
    out = {}
    for path in sorted((sweep_dir / "variants").glob("*/summary.json")):
        summary = json.loads(path.read_text())
        out[path.parent.name] = {k: summary[k] for k in ("final_metrics", "engine", "status", "seed")}
    return out


def test_validate_refuses_shared_processes_on_a_cluster_in_one_line(write_scenario, cli):
    path = write_scenario({**SWEEP, "sweep": {**SWEEP["sweep"], "processes": "shared"},
                           "engine": {"type": "ray", "address": "127.0.0.1:6379"}})
    code, _, err = cli("validate", path)
    assert code == 2 and err.strip().splitlines() == [
        f"error: {path}: sweep.processes: shared runs on the local engine only (engine.type is 'ray'); use warm"]


def test_the_slots_deal_the_variants_in_turn():
    assert slots(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert slots(["a"], 4) == [["a"]]
    assert refusal("federated", "local") is None
    assert "local engine only" in (refusal("federated", "ray") or "")
    assert "launch training ranks" in (refusal("pretrain", "local") or "")


@pytest.fixture(scope="module")
def shared_sweep(tmp_path_factory) -> tuple[Path, Path, dict[int, tuple[int, str]]]:
    """The sweep's file, and its run with shared processes (its folder, the processes seen in it)."""
    folder = tmp_path_factory.mktemp("shared")
    (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    done, seen = _watched_sweep(folder / "sweep.yaml", "--run-dir", folder / "run", "--set", "sweep.processes=shared")
    assert done.returncode == 0, done.stderr
    return folder / "sweep.yaml", folder / "run", seen


@pytest.mark.integration
def test_variants_sharing_one_process_and_ray_give_the_numbers_of_a_process_each(shared_sweep, tmp_path):
    path, shared, seen = shared_sweep

    warm, seen_warm = _watched_sweep(path, "--run-dir", tmp_path / "warm")

    assert warm.returncode == 0, warm.stderr
    raylets = [command for _, command in seen.values() if command.split(" ")[0].endswith("raylet")]
    assert len(raylets) == 1  # one slot: one Ray for its two variants
    assert len([command for _, command in seen_warm.values() if command.split(" ")[0].endswith("raylet")]) == 2
    assert _summaries(shared) == _summaries(tmp_path / "warm")  # bit for bit, engine described
    assert len(_final_metrics(shared)) == 2


@pytest.mark.integration
def test_a_failing_variant_leaves_its_slot_going(write_scenario, tmp_path):
    path = write_scenario({**SWEEP, "federated": {**SWEEP["federated"], "attack": None},
                           "sweep": {"grid": {"workload.lr": [1e30, 0.05], "seed": [1]}, "parallel": 1,
                                     "processes": "shared"}})

    cli_process("run", path, "--run-dir", tmp_path / "sweep", "--quiet")

    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    assert (summary["completed"], summary["failed"]) == (1, 1)
    failed = next(r for r in summary["variants"].values() if r["status"] == "failed")
    assert failed["exit_code"] == 2 and "diverged at round 1" in failed["error"]


@pytest.mark.integration
def test_a_killed_slot_leaves_its_variants_failed_and_resume_finishes_them_alike(shared_sweep, tmp_path):
    path, whole, _ = shared_sweep

    # The slot's process is killed after its first variant's first round: the second never starts.
    cli_process("run", path, "--run-dir", tmp_path / "killed", "--quiet", "--set", "sweep.processes=shared",
                env_extra={KILL_AFTER_RECORDS: "1"})
    results = json.loads((tmp_path / "killed" / "summary.json").read_text())["variants"]
    ended = "its shared process ended (killed by signal 9) before it finished"
    assert [r["error"] for r in results.values()] == [ended] * 2

    resumed = cli_process("resume", tmp_path / "killed", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert _final_metrics(tmp_path / "killed") == _final_metrics(whole)


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["workload", "decentralized"])
def test_every_kind_that_may_share_gives_the_numbers_of_a_process_each(kind, write_scenario, tmp_path):
    # What one variant leaves in the process (a global generator, a cache, torch's settings) must not
    # reach the next: the second seed runs after the first in the shared slot, alone in the warm one.
    scenario = WORKLOAD_SWEEP if kind == "workload" else {**DECENTRALIZED, "sweep": {"grid": {"seed": [1, 2]}}}
    path = write_scenario({**scenario, "sweep": {**scenario["sweep"], "parallel": 1}})
    assert refusal(kind, "local") is None

    for processes in ("shared", "warm"):
        done = cli_process("run", path, "--run-dir", tmp_path / processes, "--quiet", "--set",
                           f"sweep.processes={processes}")
        assert done.returncode == 0, done.stderr
    assert _summaries(tmp_path / "shared") == _summaries(tmp_path / "warm")
    assert len(_final_metrics(tmp_path / "shared")) == 2
