"""Reports: rendered from a run folder, checked in a real headless browser, and trackers."""

from __future__ import annotations

import json

import pytest

from tests.browser import assert_readable
from tests.conftest import requires_chromium


@pytest.mark.integration
@requires_chromium
def test_training_report_leads_with_its_curves_in_headless_chromium(cli, write_scenario, tmp_path):
    run_dir = tmp_path / "run"
    assert cli("run", write_scenario(), "--run-dir", run_dir, "--quiet")[0] == 0
    page = assert_readable(run_dir / "report", first_screen="curve-loss.png", name="training")
    assert page.tables >= 1 and page.sections[0] == "Metrics over training"


@pytest.mark.integration
def test_trackers_receive_every_record_the_config_tags_and_report(cli, write_scenario, tmp_path):
    run_dir = tmp_path / "run"
    code, _, err = cli("run", write_scenario({"report": {"trackers": ["tensorboard", "mlflow"]}}),
                       "--run-dir", run_dir, "--quiet", "--set", "workload.hidden=12")
    assert code == 0, err

    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("test_accuracy")] == [4, 8, 12, 16, 20, 24]
    assert "step" not in events.Tags()["scalars"]  # the x-axis, not a metric
    hparams = EventAccumulator(str(run_dir / "tensorboard"))  # add_hparams writes its own event file
    hparams.Reload()
    assert any(tag.startswith("final/") for tag in hparams.Tags()["scalars"])
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")  # the runs root's store
    run_id = json.loads((run_dir / "trackers" / "mlflow.json").read_text())["run_id"]
    history = client.get_metric_history(run_id, "test_accuracy")
    assert [m.step for m in history] == [4, 8, 12, 16, 20, 24]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and "step" not in run.data.metrics
    assert run.data.params["workload.hidden"] == "12" and run.data.params["seed"] == str(run.data.tags["seed"])
    assert run.data.tags["kind"] == "workload" and run.data.tags["scenario"] == run.data.params["name"]
    assert run.info.run_name == f"{run.data.params['name']} (workload.hidden=12)"
    assert "report/index.html" in {a.path for a in client.list_artifacts(run_id, "report")}


def test_the_run_folder_records_its_overrides_source_and_commit(cli, write_scenario, tmp_path):
    import yaml

    scenario = write_scenario()
    code, _, err = cli("run", scenario, "--run-dir", tmp_path / "run", "--quiet", "--set", "training.steps=8",
                       "--set", "seed=4")
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "run" / "overrides.yaml").read_text()) == ["training.steps=8", "seed=4"]
    source = json.loads((tmp_path / "run" / "summary.json").read_text())["source"]
    assert source["file"] == str(scenario) and source["overrides"] == ["training.steps=8", "seed=4"]
    assert isinstance(source["dirty"], bool) and len(source["commit"]) == 12  # tests run from the checkout
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "(training.steps=8, seed=4): training report</h1>" in page
