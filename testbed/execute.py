"""Start, resume and validate runs: the glue between a scenario, its run folder, engine and runner."""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed import kinds
from testbed.console import library_output
from testbed.device import run_device
from testbed.engines.registry import make_engine
from testbed.errors import ResumableFailure, RunInterrupted, UserError
from testbed.faults import maybe_kill
from testbed.loading import validate_raw
from testbed.progress import ProgressReporter, arm_name, progress_enabled
from testbed.provenance import provenance, run_fingerprint, source_commit
from testbed.report.render import render_report
from testbed.run import RunFolder
from testbed.runner import RunContext
from testbed.scenario import Scenario
from testbed.trackers import open_trackers
from testbed.validation import preflight
from testbed.workloads.usermodel import worker_code

VERSIONED_PACKAGES = ("testbed", "torch", "numpy", "ray", "flwr", "deepspeed", "opacus", "networkx")


def default_run_dir(scenario: Scenario) -> Path:
    return Path("runs") / f"{scenario.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def start_run(scenario: Scenario, source: str, run_dir: Path | None = None, quiet: bool = False,
              overrides: Sequence[str] = (), verbose: bool = False, report: bool = True) -> RunFolder:
    """Validate, create the run folder (recording the ``--set`` ``overrides``) and run the scenario to the end
    (``verbose``: libraries' logs on the console, not in the run's log.txt; ``report`` False: no report,
    `report_run` renders it later)."""
    preflight(scenario, source)
    run = RunFolder.create(run_dir or default_run_dir(scenario), scenario.model_dump(mode="json"), overrides, source)
    try:
        _execute(scenario, run, quiet, source, verbose, report)
    except ResumableFailure:
        raise  # a lost node: the folder is what `testbed resume` continues, checkpoint or not
    except Exception:
        # A user error or a bug before the first checkpoint: nothing worth keeping, so leave no
        # half-written folder. After one the folder stays, for `testbed resume` once the cause is
        # fixed (an interrupted run, KeyboardInterrupt, always stays).
        if not run.has_checkpoint:
            run.remove_written()  # a --run-dir that was the user's (empty) folder, or a link to one, stays
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(run.path) from None
    finally:
        run.unlock()
    return run


def resume_run(run_dir: Path, quiet: bool = False, verbose: bool = False, report: bool = True) -> RunFolder:
    """Continue an interrupted run from its newest checkpoint (refused while another process runs it)."""
    run = RunFolder.open(run_dir)
    run.lock()
    try:
        if run.completed:
            raise UserError(f"{run.path}: run already completed; 'testbed report {run.path}' re-renders its report")
        scenario = validate_raw(run.read_config(), source=str(run.config_path))
        preflight(scenario, str(run.config_path))
        run.rewind_to_checkpoint()
        _execute(scenario, run, quiet, str(run.config_path), verbose, report)
    except KeyboardInterrupt:
        raise RunInterrupted(run.path) from None
    finally:
        run.unlock()
    return run


def _execute(scenario: Scenario, run: RunFolder, quiet: bool, source: str, verbose: bool = False,
             report: bool = True) -> None:
    with library_output(run.path, verbose):
        _execute_quietly(scenario, run, quiet, source, report)


def _execute_quietly(scenario: Scenario, run: RunFolder, quiet: bool, source: str, report: bool = True) -> None:
    runner = kinds.runner(scenario.kind)
    trackers = open_trackers(scenario.report, run, run.title())

    def log_metrics(record: dict[str, Any]) -> None:
        run.append_metrics(record)
        for tracker in trackers:
            tracker.log(record)
        maybe_kill(run.metrics_count)

    started = time.perf_counter()
    try:
        with make_engine(scenario.engine, runner.needs_one_of, runner.parallel_tasks(scenario), quiet,
                         worker_code(scenario.workload.params if scenario.workload is not None else {})) as engine:
            progress = ProgressReporter(progress_enabled(quiet), arm_name(scenario))
            ctx = RunContext(scenario, run, engine, progress, log_metrics, source)
            device = run_device(scenario, note=True)  # recorded below: where the numbers were computed
            final = runner.run(ctx)
            engine_info = engine.describe()
        run.write_summary({
            "name": scenario.name, "kind": scenario.kind, "seed": scenario.seed, "status": "completed",
            "final_metrics": final, "engine": engine_info, "device": device,
            "timings": {**ctx.timings, "wall_s": round(time.perf_counter() - started, 3)},
            "source": provenance(run, source), "versions": _versions(), "fingerprint": run_fingerprint(),
        })
        # Without a report (a sweep whose variants nobody reads one of) trackers get the folder it would be in.
        report_dir = report_run(run).parent if report else run.report_dir
        for tracker in trackers:
            tracker.finish(final, report_dir)
    finally:
        for tracker in trackers:
            tracker.close()


def report_run(run: RunFolder) -> Path:
    """(Re-)render the report of a run folder with the sections of its kind and report kind."""
    config = run.read_config()
    sections = kinds.runner(config["kind"]).report_sections(config) if config.get("kind") in kinds.RUNNERS else []
    layout = kinds.report_layout(config.get("report", {}).get("kind", "training"), config.get("kind"))
    return render_report(run, layout, sections)


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    commit = source_commit()
    if commit:
        versions["testbed_commit"] = commit
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
