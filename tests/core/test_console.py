"""The console a person reads: bars that name their arm and metric, library chatter in the run's
log, `testbed list scenarios` of the working checkout, and a quiet exit into a closed pipe."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import warnings

import pytest
import yaml
from rich.console import Console

from testbed.console import LOG_NAME, library_output
from testbed.progress import ProgressReporter, arm_name
from testbed.scenario import Scenario


def _last_frame(arm: str, description: str, records: list[dict]) -> str:
    """The bar's last frame after one advance per record, as a 120-column terminal shows it."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with ProgressReporter(enabled=True, arm=arm, console=console).task(description, total=10) as advance:
        for record in records:
            advance(1, record)
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", frame).strip() for frame in out.getvalue().split("\r")]
    return [frame for frame in frames if frame][-1]


def test_a_bar_names_its_arm_and_shows_the_latest_headline_metric():
    frame = _last_frame("sdea", "rounds", [{"round": 1, "test_accuracy": 0.25}, {"round": 2, "test_accuracy": 0.4125}])

    assert frame.startswith("sdea rounds ") and "2/10 test_accuracy 0.4125" in frame


def test_a_baseline_bar_is_told_apart_from_the_main_arm():
    baseline = ProgressReporter(enabled=True, arm="sdea").for_arm("baseline fedavg")

    assert baseline.enabled
    assert _last_frame(baseline.arm, "rounds", [{"round": 1, "test_loss": 2.5}]).startswith("baseline fedavg rounds ")


def test_a_bar_keeps_its_metric_through_records_without_one():
    frame = _last_frame("tiny", "training", [{"step": 4, "loss": 0.75}, {"step": 8, "lr": 0.1}])

    assert "2/10 loss 0.75" in frame


def test_the_arm_of_a_federated_run_is_its_strategy_and_otherwise_the_scenario():
    federated = Scenario.model_validate({
        "name": "fl", "kind": "federated", "data": {"dataset": "digits", "num_clients": 4},
        "workload": {"name": "classifier"}, "federated": {"rounds": 2, "strategy": {"name": "krum"}}})
    workload = Scenario.model_validate({"name": "tiny", "kind": "workload", "workload": {"name": "classifier"}})

    assert arm_name(federated) == "krum" and arm_name(workload) == "tiny"


def test_library_logs_and_warnings_go_to_the_run_log_unless_verbose(tmp_path, capsys):
    with library_output(tmp_path, verbose=False):
        logging.getLogger("mlflow.store").info("Creating initial MLflow database tables...")
        logging.getLogger("flwr").warning("Manually terminating ClientAppActor")
        warnings.warn("opacus: secure RNG turned off", UserWarning, stacklevel=1)
    captured = capsys.readouterr()
    log = (tmp_path / LOG_NAME).read_text()

    assert "Creating initial MLflow" in log and "Manually terminating" in log and "secure RNG" in log
    assert "MLflow" not in captured.err + captured.out and "terminating" not in captured.err
    assert not logging.getLogger("mlflow").handlers or logging.getLogger("mlflow").propagate  # restored


def test_a_library_that_asked_for_warnings_only_is_not_made_to_say_more(tmp_path, capsys, monkeypatch):
    # torch sets its logger to WARNING; its own logging system's INFO ("compile_threads set to 2" on
    # torch.optim's first use) reached the console of the flagship demo while the run lowered it to INFO.
    monkeypatch.setattr(logging.getLogger("torch"), "level", logging.WARNING)
    monkeypatch.setattr(logging.getLogger("flwr"), "level", logging.DEBUG)
    with library_output(tmp_path, verbose=False):
        assert logging.getLogger("torch").level == logging.WARNING
        assert logging.getLogger("flwr").level == logging.INFO  # kept at INFO, DEBUG left out
        logging.getLogger("torch._inductor.config").info("compile_threads set to 2")

    assert "compile_threads" not in (tmp_path / LOG_NAME).read_text() + capsys.readouterr().err
    assert logging.getLogger("torch").level == logging.WARNING


def test_sqlalchemy_set_up_chatter_stays_out_of_the_run_log_and_its_warnings_do_not(tmp_path):
    # Flower's link state configures SQLAlchemy mappers in every federated run: ~250 INFO lines.
    before = logging.getLogger("sqlalchemy").level  # another test's library may have set it already
    with library_output(tmp_path, verbose=False):
        logging.getLogger("sqlalchemy.orm.mapper.Mapper").info("(Message|message_ins) _configure_property")
        logging.getLogger("alembic.runtime.plugins").info("setup plugin alembic.autogenerate.schemas")
        logging.getLogger("sqlalchemy.pool").warning("connection pool exhausted")
    log = (tmp_path / LOG_NAME).read_text()

    assert "_configure_property" not in log and "setup plugin" not in log
    assert "connection pool exhausted" in log
    assert logging.getLogger("sqlalchemy").level == before  # restored


def test_verbose_leaves_library_logs_on_the_console(tmp_path):
    with library_output(tmp_path, verbose=True):
        logging.getLogger("flwr").warning("Manually terminating ClientAppActor")

    assert not (tmp_path / LOG_NAME).exists()


@pytest.mark.parametrize("verbose", [False, True])
def test_a_run_writes_library_output_to_its_log_unless_verbose(cli, write_scenario, tmp_path, verbose):
    code, _, err = cli("run", write_scenario({"training": {"steps": 4, "eval_every": 2, "checkpoint_every": 4}}),
                       "--run-dir", tmp_path / "run", "--quiet", *(["--verbose"] if verbose else []))

    assert code == 0, err
    assert (tmp_path / "run" / LOG_NAME).is_file() is not verbose


def test_list_scenarios_shows_the_working_checkout_not_the_installed_copy(cli, tmp_path, monkeypatch):
    (tmp_path / "scenarios" / "mine").mkdir(parents=True)
    (tmp_path / "scenarios" / "mine" / "own.yaml").write_text(
        yaml.safe_dump({"name": "own", "kind": "workload", "description": "my own scenario"}))
    monkeypatch.chdir(tmp_path)

    code, out, _ = cli("list", "scenarios")

    assert code == 0
    assert out.splitlines() == [f"{'scenarios/mine/own.yaml':28s} [workload] my own scenario"]


@pytest.mark.integration
def test_listing_into_a_closed_pipe_exits_quietly(tmp_path):
    # `testbed list scenarios | head -1`: the reader is gone before the listing is written.
    process = subprocess.Popen([sys.executable, "-m", "testbed.cli", "list", "scenarios"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read().decode()
    code = process.wait(timeout=120)

    assert err == "" and code == 0


def test_ray_workers_output_goes_to_the_run_log(tmp_path, capsys):
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from testbed.console import RAY_HANDLER, divert_ray_workers

    try:
        with library_output(tmp_path, verbose=False):
            divert_ray_workers()  # as the Ray engine does after ray.init
            dispatcher.emit({"lines": ["WARNING ray_actor.py:40 -- Manually terminating ClientAppActor"],
                             "pid": 4242, "is_err": True, "actor_name": "ClientAppActor"})
            dispatcher.emit({"lines": ["INFO autoscaler.py:147 -- The autoscaler took 0.0 seconds to fetch the list"],
                             "pid": "autoscaler", "is_err": True})  # its routine status: not even in the log
    finally:
        dispatcher.remove_handler(RAY_HANDLER)

    log = (tmp_path / LOG_NAME).read_text()
    assert "ray.worker(ClientAppActor) OUTPUT WARNING ray_actor.py:40 -- Manually terminating" in log
    assert "autoscaler took" not in log
    assert "terminating" not in capsys.readouterr().err


def test_ray_output_after_the_run_ended_is_dropped_not_written_into_a_removed_folder(tmp_path, capsys):
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from testbed.console import RAY_HANDLER, divert_ray_workers

    folder = tmp_path / "run"
    folder.mkdir()
    try:
        with library_output(folder, verbose=False):
            divert_ray_workers()
        (folder / LOG_NAME).unlink()
        folder.rmdir()  # a run that failed before its first checkpoint leaves no folder
        dispatcher.emit({"lines": ["late line"], "pid": 7, "is_err": True})
    finally:
        dispatcher.remove_handler(RAY_HANDLER)

    assert not folder.exists() and "Logging error" not in capsys.readouterr().err
