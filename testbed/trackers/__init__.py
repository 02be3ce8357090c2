"""Experiment trackers, switched on by ``report.trackers: [name, ...]`` or a ``report.tracking.<name>`` block.

Each tracker is one `Tracker` class that declares its name, its typed settings (``Config``) and
the package it needs; the registry below is derived from those classes plus the
``testbed.trackers`` entry-point group. Naming a tracker whose package is missing is a user error
that names the pip extra::

    report:
      trackers: [tensorboard]
      tracking:
        mlflow: {experiment: my-study}            # default store: <runs root>/mlruns/mlflow.db
        wandb: {project: my-study}                # offline: files under <run>/wandb/
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from testbed.errors import UserError
from testbed.trackers.base import Tracker
from testbed.trackers.mlflow import MlflowTracker
from testbed.trackers.tensorboard import TensorBoardTracker
from testbed.trackers.wandb import WandbTracker

if TYPE_CHECKING:
    from testbed.run import RunFolder
    from testbed.scenario import ReportConfig, Scenario

BUILT_IN: tuple[type[Tracker], ...] = (TensorBoardTracker, MlflowTracker, WandbTracker)
_registry: dict[str, type[Tracker]] = {}


def registered_trackers() -> dict[str, type[Tracker]]:
    """Every tracker by name: the built-in ones, then the plugins of ``testbed.trackers``."""
    if not _registry:
        from testbed.plugins import load_entry_points

        found: dict[str, type[Tracker]] = {cls.name: cls for cls in BUILT_IN}
        load_entry_points("testbed.trackers", found, Tracker, as_class=True)
        _registry.update(found)
    return _registry


def selected(report: ReportConfig) -> dict[str, dict[str, Any]]:
    """The trackers a report block switches on, each with its raw settings (``{}``: the defaults)."""
    return {**{name: {} for name in report.trackers}, **{name: dict(s) for name, s in report.tracking.items()}}


def check_trackers(report: ReportConfig, source: str) -> None:
    """Refuse an unknown tracker, bad settings or a missing package, in one line naming the field."""
    from testbed.errors import did_you_mean
    from testbed.loading import describe_error

    trackers = registered_trackers()
    for name, settings in selected(report).items():
        field = f"report.tracking.{name}" if name in report.tracking else "report.trackers"
        if name not in trackers:
            raise UserError(f"{source}: {field}: unknown tracker '{name}'{did_you_mean(name, list(trackers))}; "
                            f"valid: {', '.join(sorted(trackers))}")
        cls = trackers[name]
        try:
            cls.Config.model_validate(settings)
        except ValidationError as err:
            raise UserError(describe_error(err, cls.Config, settings, source, (),
                                           ("report", "tracking", name))) from None
        if not cls.installed():
            raise UserError(f"{source}: {field}: '{name}' needs the {cls.package} package; "
                            f"pip install 'testbed[{cls.extra}]'")


def open_trackers(report: ReportConfig, run: RunFolder, run_name: str) -> list[Tracker]:
    """Instantiate the trackers a run's report block names."""
    trackers = registered_trackers()
    return [trackers[name](run, run_name, trackers[name].Config.model_validate(raw))
            for name, raw in selected(report).items()]


@contextmanager
def sweep_tracking(sweep: RunFolder, scenario: Scenario) -> Iterator[None]:
    """Around a sweep's variants: MLflow's parent run, under which each variant's run nests."""
    raw = selected(scenario.report).get(MlflowTracker.name)
    if raw is None:
        yield
        return
    from testbed.console import library_output
    from testbed.trackers.mlflow import MlflowSettings, MlflowSweep

    with library_output(sweep.path, verbose=False):  # MLflow's database set-up lines, off the console
        parent = MlflowSweep(sweep, MlflowSettings.model_validate(raw))
    completed = False
    try:
        yield
        completed = True
    finally:
        with library_output(sweep.path, verbose=False):
            parent.close(completed)
