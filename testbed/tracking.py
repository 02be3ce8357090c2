"""Optional experiment trackers behind one small base class, switched on by ``report.trackers``.

Each tracker mirrors the records of metrics.jsonl (``step`` or ``round`` is the x-axis, not a
metric); the run folder stays the source of truth. MLflow also gets the resolved config as
params, the kind, scenario, seed, commit and (federated) strategy and attack as tags, and the
report as an artifact; TensorBoard gets the config's scalars and the final metrics as hparams.
A tracker registers only when its package imports; naming a missing one is a user error that
names the pip extra.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.errors import UserError
from testbed.provenance import source_commit

if TYPE_CHECKING:
    from testbed.run import RunFolder

TRACKER_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}


class Tracker(ABC):
    """Receives every metrics record of a run."""

    def __init__(self, run: RunFolder, run_name: str):
        self.run = run
        self.run_name = run_name

    @abstractmethod
    def log(self, record: dict[str, Any]) -> None:
        """Record one metrics record (its ``step`` or ``round`` is the x-axis)."""

    @abstractmethod
    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        """The run completed with ``final`` metrics and its report in ``report_dir``."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release (after `finish`, or on a failure without it)."""


AXES = ("step", "round")
# The config keys whose values name a run in a tracker's run list.
TAG_KEYS = {"kind": "kind", "scenario": "name", "seed": "seed", "strategy": "federated.strategy.name",
            "attack": "federated.attack.name", "workload": "workload.name"}


def _numeric(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if k not in AXES and isinstance(v, int | float) and not isinstance(v, bool)}


def flatten(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf value) of a nested config; lists are leaves."""
    if isinstance(config, dict) and config:
        for key, value in config.items():
            yield from flatten(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), config


def run_tags(run: RunFolder) -> dict[str, str]:
    """The tags that tell runs apart in a tracker: kind, scenario, seed, commit, strategy, attack."""
    values = dict(flatten(run.read_config()))
    tags = {tag: str(values[key]) for tag, key in TAG_KEYS.items() if values.get(key) is not None}
    commit = source_commit()
    if commit:
        tags["commit"] = commit
    return tags


def _step(record: dict[str, Any]) -> int:
    return int(record.get("step", record.get("round", 0)))


class TensorBoardTracker(Tracker):
    """Writes TensorBoard event files under ``<run>/tensorboard``."""

    def __init__(self, run: RunFolder, run_name: str):
        super().__init__(run, run_name)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run.path / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        for key, value in _numeric(record).items():
            self.writer.add_scalar(key, value, _step(record))

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        # hparams take numbers, strings and booleans: other leaves (lists, None) as their text
        config = flatten(self.run.read_config())
        hparams = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in config}
        metrics = {f"final/{k}": v for k, v in _numeric(final).items()}
        self.writer.add_hparams(hparams, metrics, run_name=".")

    def close(self) -> None:
        self.writer.close()


def mlflow_uri(run: RunFolder) -> str:
    """The tracking URI of a run's MLflow store."""
    return f"sqlite:///{(run.path / 'mlruns' / 'mlflow.db').resolve()}"


class MlflowTracker(Tracker):
    """Logs to a local MLflow store, ``<run>/mlruns/mlflow.db`` (SQLite: MLflow 3 retired its plain-file
    store); a resumed run continues the same MLflow run. Browse with
    ``mlflow ui --backend-store-uri sqlite:///<run>/mlruns/mlflow.db``."""

    def __init__(self, run: RunFolder, run_name: str):
        super().__init__(run, run_name)
        from mlflow.tracking import MlflowClient

        store = run.path / "mlruns"
        store.mkdir(exist_ok=True)
        self.client = MlflowClient(tracking_uri=mlflow_uri(run))
        id_file = store / "testbed_run_id"
        if id_file.is_file():
            self.run_id = id_file.read_text().strip()
        else:
            experiment = self.client.get_experiment_by_name("testbed")
            experiment_id = (experiment.experiment_id if experiment else
                             self.client.create_experiment("testbed", artifact_location=(store / "artifacts").as_uri()))
            self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags=run_tags(run)).info.run_id
            self._log_params()
            id_file.write_text(self.run_id)

    def _log_params(self) -> None:
        from mlflow.entities import Param

        params = [Param(key, str(value)[:MLFLOW_PARAM_CHARS]) for key, value in flatten(self.run.read_config())]
        for start in range(0, len(params), MLFLOW_BATCH):  # MLflow takes at most 100 params a call
            self.client.log_batch(self.run_id, params=params[start:start + MLFLOW_BATCH])

    def log(self, record: dict[str, Any]) -> None:
        for key, value in _numeric(record).items():
            self.client.log_metric(self.run_id, key, value, step=_step(record))

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        self.client.log_artifacts(self.run_id, str(report_dir), artifact_path="report")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


MLFLOW_BATCH = 100
MLFLOW_PARAM_CHARS = 6000  # MLflow's limit on a param's value


TRACKERS: dict[str, type[Tracker]] = {"tensorboard": TensorBoardTracker, "mlflow": MlflowTracker}


def check_trackers(names: list[str], source: str) -> None:
    """Refuse trackers whose package is not installed, naming the pip extra."""
    for name in names:
        if importlib.util.find_spec(TRACKER_PACKAGES[name]) is None:
            raise UserError(f"{source}: report.trackers: '{name}' needs the {TRACKER_PACKAGES[name]} package; "
                            "pip install 'testbed[trackers]'")


def open_trackers(names: list[str], run: RunFolder, run_name: str) -> list[Tracker]:
    """Instantiate the named trackers for a run."""
    return [TRACKERS[name](run, run_name) for name in names]
