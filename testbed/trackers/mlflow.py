"""MLflow: every run of a runs root in one store, a sweep as a parent run with a child per variant.

The default store is ``<runs root>/mlruns/mlflow.db`` (SQLite: MLflow 3 retired its plain-file
store), shared by every run started under that root (``runs/`` by default; a sweep variant's root
is its sweep's), so MLflow's compare view sees them all. Browse it with::

    mlflow ui --backend-store-uri sqlite:///$PWD/runs/mlruns/mlflow.db

``report.tracking.mlflow: {tracking_uri: ..., experiment: ...}`` names another store or
experiment. A run's MLflow run id is kept in ``<run>/trackers/mlflow.json``, so a resumed run
continues the same MLflow run. A sweep's parent run id is kept the same way in the sweep's folder,
where each variant (its own process, maybe on another node) reads it: no client is shared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.trackers.base import SWEEP_IDS, Tracker, flatten, numeric, run_params, run_tags, step_of

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from testbed.run import RunFolder

MLFLOW_BATCH = 100  # MLflow takes at most 100 params a call
MLFLOW_PARAM_CHARS = 6000  # MLflow's limit on a param's value
ID_FILE = "mlflow.json"


class MlflowSettings(StrictModel):
    """``report.tracking.mlflow``: where the runs go."""

    tracking_uri: str | None = Field(None, description=(
        "an MLflow tracking URI (sqlite:///..., http://host:5000, databricks); "
        "default: sqlite:///<runs root>/mlruns/mlflow.db"))
    experiment: str = Field("testbed", min_length=1, description="the MLflow experiment the runs are filed under")


def runs_root(run_path: Path) -> Path:
    """The folder whose runs share a store: the run's parent, or a sweep variant's sweep's parent."""
    path = run_path.resolve()
    sweep = sweep_folder(path)
    return (sweep or path).parent


def sweep_folder(run_path: Path) -> Path | None:
    """The sweep folder a variant's run folder sits in (``<sweep>/variants/<slug>``), or None."""
    parent = run_path.resolve().parent
    return parent.parent if parent.name == "variants" and (parent.parent / "config.yaml").is_file() else None


def store_uri(settings: MlflowSettings, root: Path) -> str:
    """The tracking URI for the runs under ``root`` (an absolute runs root)."""
    return settings.tracking_uri or f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


def _client(settings: MlflowSettings, root: Path) -> tuple[MlflowClient, str]:
    """A client of the store of the runs under ``root`` and the id of its experiment (made, with its
    artifact folder, if new)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store_uri(settings, root))
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is not None:
        return client, experiment.experiment_id
    # Absolute: a relative folder has no file URI (the crash of a default `runs/...` run folder).
    artifacts = None if settings.tracking_uri else (root / "mlruns" / "artifacts").as_uri()
    return client, client.create_experiment(settings.experiment, artifact_location=artifacts)


def _saved_id(folder: Path) -> str | None:
    path = folder / SWEEP_IDS / ID_FILE
    return str(json.loads(path.read_text())["run_id"]) if path.is_file() else None


def _save_id(folder: Path, run_id: str, uri: str) -> None:
    from testbed.run import atomic_write

    (folder / SWEEP_IDS).mkdir(exist_ok=True)
    atomic_write(folder / SWEEP_IDS / ID_FILE, json.dumps({"run_id": run_id, "tracking_uri": uri}).encode())


class MlflowTracker(Tracker):
    """Params, tags, metrics and the report to an MLflow store shared by the runs of a runs root.

    Params are the blocks the kind reads; metrics are logged per step or round; the report and
    summary.json are artifacts."""

    name = "mlflow"
    Config = MlflowSettings
    package = "mlflow"

    def __init__(self, run: RunFolder, run_name: str, config: MlflowSettings):
        super().__init__(run, run_name, config)
        self.finished = False
        self.client, experiment_id = _client(config, runs_root(run.path))
        saved = _saved_id(run.path)
        if saved is not None:
            self.run_id = saved
            return
        config_dict = run.read_config()
        tags = run_tags(config_dict)
        sweep = sweep_folder(run.path)
        parent = _saved_id(sweep) if sweep is not None else None
        if parent is not None:
            tags["mlflow.parentRunId"] = parent  # MLflow's own tag: the variant nests under its sweep
        self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags=tags).info.run_id
        log_params(self.client, self.run_id, run_params(config_dict))
        _save_id(run.path, self.run_id, store_uri(config, runs_root(run.path)))

    def log(self, record: dict[str, Any]) -> None:
        for key, value in numeric(record).items():
            self.client.log_metric(self.run_id, key, value, step=step_of(record))

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        log_outcome(self.client, self.run_id, self.run, report_dir)
        self.finished = True

    def close(self) -> None:
        # KILLED, not FAILED: an interrupted run resumes into the same MLflow run
        self.client.set_terminated(self.run_id, status="FINISHED" if self.finished else "KILLED")


def log_params(client: MlflowClient, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    entries = [Param(key, str(value)[:MLFLOW_PARAM_CHARS]) for key, value in params.items()]
    for start in range(0, len(entries), MLFLOW_BATCH):
        client.log_batch(run_id, params=entries[start:start + MLFLOW_BATCH])


def log_outcome(client: MlflowClient, run_id: str, run: RunFolder, report_dir: Path) -> None:
    """The report folder and summary.json as the run's artifacts."""
    if report_dir.is_dir():
        client.log_artifacts(run_id, str(report_dir), artifact_path="report")
    if run.summary_path.is_file():
        client.log_artifact(run_id, str(run.summary_path))


class MlflowSweep:
    """A sweep's parent run: opened before its variants start, closed with the sweep's report."""

    def __init__(self, sweep: RunFolder, config: MlflowSettings):
        self.sweep = sweep
        self.client, experiment_id = _client(config, sweep.path.resolve().parent)
        saved = _saved_id(sweep.path)
        if saved is not None:  # a resumed sweep keeps its parent
            self.run_id = saved
            return
        raw = sweep.read_config()
        tags = {**run_tags(raw), "kind": "sweep", "variant_kind": str(raw.get("kind"))}
        self.run_id = self.client.create_run(experiment_id, run_name=sweep.title(), tags=tags).info.run_id
        grid = dict(flatten((raw.get("sweep") or {}).get("grid") or {}, "sweep.grid."))
        log_params(self.client, self.run_id, {"name": raw.get("name"), **grid})
        _save_id(sweep.path, self.run_id, store_uri(config, sweep.path.resolve().parent))

    def close(self, completed: bool) -> None:
        if completed:
            log_outcome(self.client, self.run_id, self.sweep, self.sweep.report_dir)
        self.client.set_terminated(self.run_id, status="FINISHED" if completed else "KILLED")
