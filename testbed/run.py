"""Run folders: the resolved config, streamed metrics, checkpoints, the summary and the report.

Layout of a run folder::

    config.yaml      the scenario as resolved (overrides applied); `resume` reads it back
    metrics.jsonl    one JSON record per round or evaluation step, appended and fsynced
    checkpoints/     ckpt-<step>.pt, written atomically; the two newest are kept
    summary.json     final metrics, timings, seed, versions; present only once the run completed
    artifacts.npz    arrays a workload leaves for its report (samples, trajectories, ...)
    report/          index.html and its PNG plots

Every file is written to a temporary name and renamed, so a crash never leaves a torn file. A
folder without summary.json is an interrupted run that `testbed resume` continues. A write that the
system refuses (disk full, read-only or unwritable folder) is a `UserError` naming the file, and
leaves the newest good checkpoint in place for `testbed resume` once the cause is fixed.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np
import torch
import yaml

from testbed.errors import UserError

KEEP_CHECKPOINTS = 2


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], None], tmp_prefix: str | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file (fsynced) and a rename.

    ``data`` is the bytes, or a function that writes them to the open file (so that a large
    checkpoint is not held in memory twice). The temporary file, next to ``path``, is named
    ``tmp_prefix`` plus a random suffix (default: ``.<name>.``).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=tmp_prefix or f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            if callable(data):
                data(handle)
            else:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunFolder:
    """One run's folder on disk, and the only code that writes into it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_path = self.path / "config.yaml"
        self.metrics_path = self.path / "metrics.jsonl"
        self.summary_path = self.path / "summary.json"
        self.checkpoint_dir = self.path / "checkpoints"
        self.report_dir = self.path / "report"
        self.artifacts_path = self.path / "artifacts.npz"
        self._metrics_count: int | None = None

    @classmethod
    def create(cls, path: str | Path, resolved_config: dict[str, Any]) -> "RunFolder":
        """Make a new run folder; an existing non-empty folder is refused."""
        run = cls(path)
        if run.path.exists() and any(run.path.iterdir()):
            raise UserError(f"{run.path}: run folder already exists; use 'testbed resume {run.path}' or another --run-dir")
        with run._writing("the run folder"):
            run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(run.config_path, yaml.safe_dump(resolved_config, sort_keys=False).encode())
            run.metrics_path.touch()
        return run

    @classmethod
    def open(cls, path: str | Path) -> "RunFolder":
        """Open an existing run folder (for resume and report)."""
        run = cls(path)
        if not run.config_path.is_file():
            raise UserError(f"{run.path}: not a run folder (no config.yaml)")
        return run

    @property
    def completed(self) -> bool:
        return self.summary_path.is_file()

    def read_config(self) -> dict[str, Any]:
        return yaml.safe_load(self.config_path.read_text())

    # metrics -------------------------------------------------------------------------------
    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one record and force it to disk, so a crash keeps every logged step."""
        count = self.metrics_count
        with self._writing(self.metrics_path.name), open(self.metrics_path, "a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._metrics_count = count + 1

    @property
    def metrics_count(self) -> int:
        """How many complete records metrics.jsonl holds."""
        if self._metrics_count is None:
            self._metrics_count = len(self.read_metrics())
        return self._metrics_count

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.is_file():
            return []
        lines = self.metrics_path.read_text().splitlines()
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line torn by a crash mid-write; resume rewrites from the checkpoint
        return records

    def truncate_metrics(self, count: int) -> None:
        """Keep the first ``count`` records: those logged before the checkpoint we resume from."""
        kept = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.read_metrics()[:count])
        with self._writing(self.metrics_path.name):
            atomic_write(self.metrics_path, kept.encode())
        self._metrics_count = None

    def rewind_to_checkpoint(self) -> None:
        """Drop metrics logged after the newest checkpoint, which the resumed run logs again."""
        checkpoint = self.latest_checkpoint()
        self.truncate_metrics(checkpoint["metrics_count"] if checkpoint else 0)

    # checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, step: int, payload: dict[str, Any]) -> Path:
        """Save a checkpoint atomically and prune old ones, keeping the newest few."""
        path = self.checkpoint_dir / f"ckpt-{step:09d}.pt"
        with self._writing(f"checkpoints/{path.name}"):
            checkpoint = {"step": step, "metrics_count": self.metrics_count, **payload}
            atomic_write(path, lambda handle: torch.save(checkpoint, handle), tmp_prefix=".ckpt.")
        for old in self._checkpoints()[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        return path

    def latest_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint, loaded with torch's safe (weights-only) unpickler."""
        checkpoints = self._checkpoints()
        if not checkpoints:
            return None
        try:
            return torch.load(checkpoints[-1], weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:  # foreign, forged or torn
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{checkpoints[-1]}: not a checkpoint this testbed can load safely "
                            f"(refused: {reason[:200]})") from None

    def _checkpoints(self) -> list[Path]:
        return sorted(self.checkpoint_dir.glob("ckpt-*.pt")) if self.checkpoint_dir.is_dir() else []

    # artifacts -----------------------------------------------------------------------------
    def write_artifacts(self, arrays: dict[str, np.ndarray]) -> None:
        """Save a workload's report arrays (numpy's format: no pickles)."""
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        with self._writing(self.artifacts_path.name):
            atomic_write(self.artifacts_path, buffer.getvalue())

    def read_artifacts(self) -> dict[str, np.ndarray]:
        if not self.artifacts_path.is_file():
            return {}
        with np.load(self.artifacts_path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}

    # summary -------------------------------------------------------------------------------
    def write_summary(self, summary: dict[str, Any]) -> None:
        with self._writing(self.summary_path.name):
            atomic_write(self.summary_path, (json.dumps(summary, indent=2, sort_keys=True) + "\n").encode())

    def read_summary(self) -> dict[str, Any] | None:
        return json.loads(self.summary_path.read_text()) if self.completed else None

    # write errors --------------------------------------------------------------------------
    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Report a refused write (disk full, read-only, permissions) as one line naming the file."""
        try:
            yield
        except OSError as err:
            code = errno.errorcode.get(err.errno, "") if err.errno else ""
            reason = f"{err.strerror or err}" + (f" ({code})" if code else "")
            checkpoints = self._checkpoints()
            if checkpoints:
                advice = (f"the last good checkpoint, checkpoints/{checkpoints[-1].name}, is intact: fix the "
                          f"cause, then 'testbed resume {self.path}'")
            else:
                advice = "no checkpoint had been written yet"
            raise UserError(f"{self.path}: cannot write {what}: {reason}; {advice}") from None
