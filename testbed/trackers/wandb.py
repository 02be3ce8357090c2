"""Weights & Biases, offline by default: the run's files under ``<run>/wandb/`` (``wandb sync`` uploads them).

The same params as MLflow (the blocks the kind reads), tags, metrics per step or round and the
final metrics as the run's summary. A resumed run continues the same W&B run (its id is kept in
``<run>/trackers/wandb.json``).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from testbed.config import StrictModel
from testbed.trackers.base import SWEEP_IDS, Tracker, numeric, run_params, run_tags, step_of

if TYPE_CHECKING:
    from testbed.run import RunFolder

ID_FILE = "wandb.json"


class WandbSettings(StrictModel):
    """``report.tracking.wandb``: the project and whether to reach the W&B service."""

    project: str = Field("testbed", min_length=1)
    entity: str | None = Field(None, description="the W&B team or user (online mode)")
    mode: Literal["offline", "online"] = Field("offline", description=(
        "offline: files only, uploaded later with `wandb sync`; online needs a login and the network"))


class WandbTracker(Tracker):
    """Logs to a W&B run whose files stay in the run folder."""

    name = "wandb"
    Config = WandbSettings
    package = "wandb"
    extra = "wandb"

    def __init__(self, run: RunFolder, run_name: str, config: WandbSettings):
        super().__init__(run, run_name, config)
        import wandb

        id_path = run.path / SWEEP_IDS / ID_FILE
        run_id = json.loads(id_path.read_text())["run_id"] if id_path.is_file() else uuid.uuid4().hex[:12]
        raw = run.read_config()
        tags = run_tags(raw)
        self.wandb_run = wandb.init(
            project=config.project, entity=config.entity, mode=config.mode, dir=str(run.path), id=run_id,
            resume="allow", name=run_name, config=run_params(raw), tags=[f"{k}={v}" for k, v in tags.items()],
            group=tags.get("scenario"), settings=wandb.Settings(silent=True, console="off"), reinit="create_new")
        id_path.parent.mkdir(exist_ok=True)
        id_path.write_text(json.dumps({"run_id": run_id}))

    def log(self, record: dict[str, Any]) -> None:
        values = numeric(record)
        if values:
            self.wandb_run.log(values, step=step_of(record))

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        self.wandb_run.summary.update(numeric(final))

    def close(self) -> None:
        import wandb

        self.wandb_run.finish()
        # finish() returns before wandb's service has written the run file (it held only its 7-byte
        # header in about a third of the runs); teardown waits for the service, so the file is whole
        # when the command returns. A command has one W&B run at a time, so nothing else is cut short.
        wandb.teardown()
