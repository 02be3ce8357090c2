"""Tracker ``csv_lines``: every metric of a run as a ``step,metric,value`` line of a CSV file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from testbed.config import StrictModel
from testbed.trackers.base import Tracker, numeric, step_of


class CsvLinesSettings(StrictModel):
    """``report.tracking.csv_lines`` (or just ``report.trackers: [csv_lines]`` for the defaults)."""

    file: str = "metrics.csv"  # inside the run folder


class CsvLinesTracker(Tracker):
    """Example plugin: metrics as ``step,metric,value`` CSV lines, the final ones as step ``final``.

    It appends, so a resumed run continues the same file.
    """

    name = "csv_lines"
    Config = CsvLinesSettings
    package = "csv"  # the module it needs (the standard library's here); `testbed validate` checks it

    def __init__(self, run, run_name: str, config: CsvLinesSettings):
        super().__init__(run, run_name, config)
        self.file = (run.path / config.file).open("a", newline="")
        self.writer = csv.writer(self.file)

    def log(self, record: dict[str, Any]) -> None:
        self.writer.writerows((step_of(record), key, value) for key, value in numeric(record).items())

    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        self.writer.writerows(("final", key, value) for key, value in numeric(final).items())

    def close(self) -> None:
        self.file.close()
