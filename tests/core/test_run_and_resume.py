"""End-to-end runs through the CLI: run folder contents, determinism, SIGKILL and resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.faults import KILL_AFTER_RECORDS
from tests.processes import cli_process


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_run_writes_a_complete_run_folder(cli, write_scenario, tmp_path):
    run_dir = tmp_path / "run"

    code, out, err = cli("run", write_scenario(), "--run-dir", run_dir, "--quiet", "--set", "training.steps=12")

    assert code == 0, err
    assert f"report: {run_dir / 'report' / 'index.html'}" in out
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["training"]["steps"] == 12  # the override is in the resolved config
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8, 12]
    assert all("test_accuracy" in r and "train_loss" in r for r in records)
    summary = _summary(run_dir)
    assert summary["status"] == "completed" and summary["seed"] == 3
    assert summary["final_metrics"]["test_accuracy"] == records[-1]["test_accuracy"]
    assert {"torch", "python", "testbed"} <= set(summary["versions"])
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["ckpt-000000010.pt", "ckpt-000000012.pt"]
    report_files = {p.name for p in (run_dir / "report").iterdir()}
    assert {"index.html", "curve-test_accuracy.png", "curve-loss.png", "confusion.png"} <= report_files
    import numpy as np

    with np.load(run_dir / "artifacts.npz") as artifacts:
        confusion = artifacts["confusion"]
    assert confusion.shape == (10, 10) and confusion.sum() == 450  # every test digit counted once


def test_same_seed_same_numbers_other_seed_other_numbers(cli, write_scenario, tmp_path):
    path = write_scenario()
    finals = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        code, _, err = cli("run", path, "--run-dir", tmp_path / name, "--quiet", "--set", f"seed={seed}")
        assert code == 0, err
        finals.append(_summary(tmp_path / name)["final_metrics"])
    assert finals[0] == finals[1]
    assert finals[0] != finals[2]


def test_checkpoint_interval_does_not_change_the_numbers(cli, write_scenario, tmp_path):
    path = write_scenario()
    cli("run", path, "--run-dir", tmp_path / "a", "--quiet", "--set", "training.checkpoint_every=3")
    cli("run", path, "--run-dir", tmp_path / "b", "--quiet", "--set", "training.checkpoint_every=100")
    assert _summary(tmp_path / "a")["final_metrics"] == _summary(tmp_path / "b")["final_metrics"]


@pytest.mark.integration
def test_sigkill_mid_run_then_resume_matches_an_uninterrupted_run(write_scenario, tmp_path):
    path = write_scenario()
    reference = cli_process("run", path, "--run-dir", tmp_path / "ref", "--quiet")
    assert reference.returncode == 0, reference.stderr

    # 4 records are steps 4..16: killed after the checkpoint at step 10, mid-way to the next one.
    killed = cli_process("run", path, "--run-dir", tmp_path / "run", "--quiet", env_extra={KILL_AFTER_RECORDS: "4"})
    assert killed.returncode == -9
    assert not (tmp_path / "run" / "summary.json").exists()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 4

    resumed = cli_process("resume", tmp_path / "run", "--quiet")

    assert resumed.returncode == 0, resumed.stderr
    assert _summary(tmp_path / "run")["final_metrics"] == _summary(tmp_path / "ref")["final_metrics"]
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == (tmp_path / "ref" / "metrics.jsonl").read_text()
    # The resumed run still names the scenario file it was started from, not its own config.yaml.
    assert _summary(tmp_path / "run")["source"]["file"] == str(path)


def test_resume_of_a_completed_run_is_refused(cli, write_scenario, tmp_path):
    cli("run", write_scenario(), "--run-dir", tmp_path / "run", "--quiet")
    code, _, err = cli("resume", tmp_path / "run")
    assert code == 2 and "already completed" in err


def test_report_rerenders_from_the_run_folder(cli, write_scenario, tmp_path):
    run_dir = tmp_path / "run"
    cli("run", write_scenario(), "--run-dir", run_dir, "--quiet")
    (run_dir / "report" / "index.html").unlink()

    code, out, _ = cli("report", run_dir)

    assert code == 0 and (run_dir / "report" / "index.html").is_file()
    page = (run_dir / "report" / "index.html").read_text()
    assert "test_accuracy" in page and "curve-loss.png" in page


@pytest.mark.slow
def test_validate_starts_nothing_and_accepts_every_bundled_scenario(cli):
    scenarios = sorted(Path(__file__).resolve().parents[2].joinpath("scenarios").rglob("*.yaml"))
    code, out, err = cli("validate", *scenarios)
    assert code == 0, err
    assert out.count(": ok") == len(scenarios)


def test_validate_no_sweep_checks_the_base_scenario_as_run_no_sweep_runs_it(cli, write_scenario):
    sweep = write_scenario({"sweep": {"grid": {"seed": [0, 1]}}})
    assert cli("validate", sweep)[1].rstrip().endswith(": ok (2 variants)")
    code, out, err = cli("validate", sweep, "--no-sweep")
    assert code == 0 and out.rstrip().endswith(": ok"), err


def test_version_names_the_package_version(cli, capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_:
        cli("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"testbed {importlib.metadata.version('testbed')}")


def test_list_shows_registered_workloads_and_scenarios(cli):
    code, out, _ = cli("list", "workloads")
    assert code == 0 and "classifier" in [line.split()[0] for line in out.splitlines()]
    code, out, _ = cli("list", "scenarios")
    assert code == 0 and "quickstart.yaml" in out
