"""TensorBoard: event files under ``<run>/tensorboard`` (``tensorboard --logdir runs``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.trackers.base import NoSettings, Tracker, numeric, run_params, step_of

if TYPE_CHECKING:
    from testbed.run import RunFolder


class TensorBoardTracker(Tracker):
    """Scalars per step or round; the config's scalars and the final metrics as hparams."""

    name = "tensorboard"
    package = "tensorboard"

    def __init__(self, run: RunFolder, run_name: str, config: NoSettings):
        super().__init__(run, run_name, config)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run.path / "tensorboard"))

    def log(self, record: dict[str, Any]) -> None:
        for key, value in numeric(record).items():
            self.writer.add_scalar(key, value, step_of(record))

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        # hparams take numbers, strings and booleans: other leaves (lists, None) as their text
        params = run_params(self.run.read_config()).items()
        hparams = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in params}
        metrics = {f"final/{k}": v for k, v in numeric(final).items()}
        self.writer.add_hparams(hparams, metrics, run_name=".")

    def close(self) -> None:
        self.writer.close()
