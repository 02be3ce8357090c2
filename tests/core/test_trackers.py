"""Trackers where a team looks: one MLflow store per runs root with sweeps as parent runs, W&B
offline files, tracker plugins through the ``testbed.trackers`` group, and bad tracker settings."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import main
from testbed.trackers.base import Tracker
from tests.conftest import TINY_SCENARIO, require_extra
from tests.core.test_bad_input_corpus import Case, _assert_one_line_naming, _prepare

SHORT = {"training": {"steps": 8, "eval_every": 4, "checkpoint_every": 4}}


def _scenario(path: Path, **changes: Any) -> Path:
    path.write_text(yaml.safe_dump({**TINY_SCENARIO, **SHORT, **changes}, sort_keys=False))
    return path


@pytest.fixture
def cli_fd(capfd):
    """The CLI in-process, capturing file descriptors: a library's handler may hold the real stderr."""

    def run(*args: Any) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capfd.readouterr()
        return code, captured.out, captured.err

    return run


def _mlflow_runs(store: Path, experiment: str) -> list:
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{store}")
    return mlflow.search_runs(experiment_names=[experiment], output_format="list")


@pytest.mark.integration
def test_mlflow_works_with_the_default_relative_run_folder_and_stays_off_the_console(cli_fd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default run folder is the relative runs/<name>-<time>
    code, out, err = cli_fd("run", _scenario(tmp_path / "s.yaml"), "--quiet", "--set", "report.trackers=[mlflow]")

    assert code == 0, err
    assert "mlflow" not in (out + err).lower()  # its INFO lines are in the run's log.txt
    (run,) = _mlflow_runs(tmp_path / "runs" / "mlruns" / "mlflow.db", "testbed")  # the runs root's one store
    run_dir = next((tmp_path / "runs").glob("tiny-*"))
    final = json.loads((run_dir / "summary.json").read_text())["final_metrics"]
    assert run.data.metrics["test_accuracy"] == pytest.approx(final["test_accuracy"])
    assert run.data.params["workload.hidden"] == "16" and run.data.tags["kind"] == "workload"
    # the blocks a workload run reads, not the sweep or another kind's
    assert {key.split(".")[0] for key in run.data.params} == {"name", "kind", "description", "seed", "device", "engine",
                                                              "data", "workload", "training", "report"}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlruns' / 'mlflow.db'}")
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"report", "summary.json"}
    assert "Creating initial MLflow database tables" in (run_dir / "log.txt").read_text()


@pytest.mark.integration
def test_a_sweep_is_one_mlflow_parent_run_with_a_child_run_per_variant(cli, tmp_path):
    scenario = _scenario(tmp_path / "sweep.yaml", name="study",
                         report={"tracking": {"mlflow": {"experiment": "my-study"}}},
                         sweep={"grid": {"workload.lr": [0.05, 0.1]}, "parallel": 2})
    code, _, err = cli("run", scenario, "--run-dir", tmp_path / "sweep", "--quiet")
    assert code == 0, err

    runs = _mlflow_runs(tmp_path / "mlruns" / "mlflow.db", "my-study")
    (parent,) = [r for r in runs if r.data.tags["kind"] == "sweep"]
    children = [r for r in runs if r is not parent]
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.grid.workload.lr"] == "[0.05, 0.1]"
    assert len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    assert sorted(r.data.params["workload.lr"] for r in children) == ["0.05", "0.1"]
    summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
    finals = sorted(v["final_metrics"]["test_accuracy"] for v in summary["variants"].values())
    assert sorted(r.data.metrics["test_accuracy"] for r in children) == pytest.approx(finals)
    assert all("sweep.grid.workload.lr" not in r.data.params for r in children)


@pytest.mark.integration
def test_wandb_offline_files_hold_the_params_metrics_per_step_and_summary(cli, tmp_path):
    require_extra("wandb", "wandb")
    from tests.core.wandb_files import records

    run_dir = tmp_path / "run"
    code, _, err = cli("run", _scenario(tmp_path / "s.yaml", report={"tracking": {"wandb": {"project": "study"}}}),
                       "--run-dir", run_dir, "--quiet")
    assert code == 0, err

    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")  # the files stay in the run folder
    found = list(records(path))
    types = [r.WhichOneof("record_type") for r in found]
    assert types.count("run") == 1, (path.stat().st_size, types)
    (run,) = [r.run for r in found if r.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["workload.hidden"] == 16 and "sweep.grid" not in config and run.project == "study"
    history = [{".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
               for r in found if r.WhichOneof("record_type") == "history"]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [h["_step"] for h in history] == [m["step"] for m in metrics] == [4, 8]
    assert [h["test_loss"] for h in history] == pytest.approx([m["test_loss"] for m in metrics])
    summary = {i.key: json.loads(i.value_json) for r in found if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update if i.key}
    final = json.loads((run_dir / "summary.json").read_text())["final_metrics"]
    assert summary["test_accuracy"] == pytest.approx(final["test_accuracy"])


class EchoTracker(Tracker):
    """A third party's tracker: writes each record's step to ``<run>/echo.txt``."""

    name = "echo"
    package = "json"

    def log(self, record: dict[str, Any]) -> None:
        with (self.run.path / "echo.txt").open("a") as handle:
            handle.write(f"{record.get('step')}\n")

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        with (self.run.path / "echo.txt").open("a") as handle:
            handle.write("finished\n")

    def close(self) -> None:
        return None


def test_a_tracker_plugin_enters_through_the_entry_point_group(cli, tmp_path, monkeypatch):
    import testbed.plugins
    import testbed.trackers

    point = EntryPoint("echo", f"{__name__}:EchoTracker", "testbed.trackers")
    monkeypatch.setattr(testbed.plugins, "entry_points",
                        lambda group: [point] if group == "testbed.trackers" else [])
    monkeypatch.setattr(testbed.trackers, "_registry", {})

    code, _, err = cli("run", _scenario(tmp_path / "s.yaml", report={"trackers": ["echo"]}),
                       "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    assert (tmp_path / "run" / "echo.txt").read_text().split() == ["4", "8", "finished"]
    assert set(testbed.trackers.registered_trackers()) == {"tensorboard", "mlflow", "wandb", "echo"}


W = "workload"
CASES = [
    Case("report-tracker-unknown", W, {"report": {"trackers": ["neptune"]}},
         ("report.trackers", "'neptune'", "valid: mlflow, tensorboard, wandb")),
    Case("report-tracker-typo", W, {"report": {"trackers": ["mlfow"]}}, ("report.trackers", "did you mean 'mlflow'")),
    Case("report-tracking-unknown", W, {"report": {"tracking": {"comet": {}}}}, ("report.tracking.comet",)),
    Case("report-tracking-key-typo", W, {"report": {"tracking": {"mlflow": {"experimnt": "x"}}}},
         ("report.tracking.mlflow.experimnt", "did you mean 'experiment'")),
    Case("report-tracking-empty-experiment", W, {"report": {"tracking": {"mlflow": {"experiment": ""}}}},
         ("report.tracking.mlflow.experiment",)),
    Case("report-tracking-wandb-mode", W, {"report": {"tracking": {"wandb": {"mode": "cloud"}}}},
         ("report.tracking.wandb.mode",)),
    Case("report-tracking-not-a-mapping", W, {"report": {"tracking": {"mlflow": "sqlite:///x.db"}}},
         ("report.tracking.mlflow",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_tracker_settings_are_one_line_exit_2_and_leave_no_folder(cli, tmp_path, monkeypatch, case: Case):
    monkeypatch.chdir(tmp_path)
    path, overrides = _prepare(case, tmp_path)
    for command in ("validate", "run"):
        args: list[Any] = [command, path, *overrides] + (["--run-dir", tmp_path / "run"] if command == "run" else [])
        code, _, err = cli(*args)
        assert code == 2, f"{command}: exit {code}: {err[-2000:]}"
        _assert_one_line_naming(err, path, overrides, case.words)
        assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()
