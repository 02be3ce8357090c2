"""Optional experiment trackers behind one small base class, switched on by ``report.trackers``.

Each tracker mirrors the records of metrics.jsonl; the run folder stays the source of truth.
A tracker registers only when its package imports; naming a missing one is a user error that
names the pip extra.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from testbed.errors import UserError

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
    def close(self) -> None:
        """Flush and release."""


def _numeric(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items() if isinstance(v, int | float) and not isinstance(v, bool)}


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
            self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
            id_file.write_text(self.run_id)

    def log(self, record: dict[str, Any]) -> None:
        for key, value in _numeric(record).items():
            self.client.log_metric(self.run_id, key, value, step=_step(record))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


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
