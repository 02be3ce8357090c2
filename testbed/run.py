"""Run folders: the resolved config, streamed metrics, checkpoints, the summary and the report.

Layout of a run folder::

    config.yaml      the scenario as resolved (overrides applied); `resume` reads it back
    overrides.yaml   the command line's ``--set KEY=VALUE`` overrides, in order (as Hydra keeps them)
    source.txt       the scenario file the run was started from (summary.json names it, also after a resume)
    metrics.jsonl    one JSON record per round or evaluation step, appended and fsynced
    checkpoints/     ckpt-<step>.pt, written atomically; the two newest are kept
    summary.json     final metrics, timings, seed, versions, source (file, overrides, commit); once completed
    artifacts.npz    arrays a workload leaves for its report (samples, trajectories, ...)
    report/          index.html and its PNG plots
    .lock            the writer's lock (below)

Every file is written to a temporary name and renamed, so a crash never leaves a torn file. A
folder without summary.json is an interrupted run that `testbed resume` continues. A write that the
system refuses (disk full, read-only or unwritable folder) is a `UserError` naming the file, and
leaves the newest good checkpoint in place for `testbed resume` once the cause is fixed.

One process at a time writes a folder: `RunFolder.create` and `RunFolder.lock` (resume, sweeps)
take an exclusive ``flock`` on ``.lock``, which holds the writer's pid, for the life of the run.
The OS drops it when the process exits, however it exits (kill -9 included), so a stale lock never
blocks a resume. A second writer gets a `UserError` naming the holder's pid. Readers (``testbed
report``, the training ranks reading config.yaml) take no lock. Within one process the lock is
shared: opening the same folder again there does not conflict with itself.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml
from numpy.typing import ArrayLike

from testbed.errors import UserError

KEEP_CHECKPOINTS = 2
LOCK_FILE = ".lock"

try:
    import fcntl
except ImportError:  # not POSIX: run folders are not locked
    fcntl = None  # type: ignore[assignment]

# The run-folder locks this process holds: lock file -> [file descriptor, RunFolders holding it].
_held_locks: dict[str, list[int]] = {}
_held_locks_guard = threading.Lock()


def _lock_holder(fd: int) -> str:
    """The pid the holder of a lock file wrote into it ("?" if it has not yet)."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "?"


def _acquire_lock(path: Path, folder: Path) -> str:
    """Take (or share, within this process) the exclusive lock on ``path``; its key."""
    key = str(path.resolve())
    with _held_locks_guard:
        if key in _held_locks:
            _held_locks[key][1] += 1
            return key
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise UserError(f"{folder} is in use by another testbed process (pid {holder}); "
                            "wait for it to end or stop it first") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held_locks[key] = [fd, 1]
        return key


def _release_lock(key: str) -> None:
    with _held_locks_guard:
        held = _held_locks.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _held_locks[key]
            os.close(held[0])  # closing the descriptor releases the flock


def _check_not_in_use(path: Path, folder: Path) -> None:
    """Refuse a folder whose lock file another process holds (without creating anything)."""
    if fcntl is None or not path.is_file() or str(path.resolve()) in _held_locks:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(f"{folder} is in use by another testbed process (pid {_lock_holder(fd)}); "
                        "wait for it to end or stop it first") from None
    finally:
        os.close(fd)  # also releases the probe's shared lock


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


def _torch_save(obj: Any, handle: BinaryIO) -> None:
    """`torch.save` into an open file. A failed write, which torch reports as a RuntimeError
    (ENOSPC included), becomes the OSError it is, so that it is reported like any other write."""
    try:
        import torch  # imported where a checkpoint is written: `validate` reads run folders' configs only

        torch.save(obj, handle)
    except RuntimeError as err:
        text = str(err).lower()
        if "write" not in text and "unexpected pos" not in text:
            raise  # not an I/O failure
        try:
            full = os.fstatvfs(handle.fileno()).f_bavail == 0
        except OSError:
            full = False
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from None
        raise OSError(errno.EIO, f"the checkpoint write failed ({str(err).strip().splitlines()[-1][:200]})") from None


class RunFolder:
    """One run's folder on disk, and the only code that writes into it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_path = self.path / "config.yaml"
        self.overrides_path = self.path / "overrides.yaml"
        self.source_path = self.path / "source.txt"
        self.metrics_path = self.path / "metrics.jsonl"
        self.summary_path = self.path / "summary.json"
        self.checkpoint_dir = self.path / "checkpoints"
        self.report_dir = self.path / "report"
        self.artifacts_path = self.path / "artifacts.npz"
        self.lock_path = self.path / LOCK_FILE
        self._metrics_count: int | None = None
        self._lock: weakref.finalize | None = None

    @classmethod
    def create(cls, path: str | Path, resolved_config: dict[str, Any], overrides: Sequence[str] = (),
               source: str | None = None) -> RunFolder:
        """Make a new run folder (started from the scenario file ``source``, where there is one); an
        existing non-empty folder is refused."""
        run = cls(path)
        if run.path.exists() and not run.path.is_dir():
            raise UserError(f"{run.path}: exists and is not a folder; use another --run-dir")
        with run._writing("the run folder"):
            if run.path.exists() and any(run.path.iterdir()):
                _check_not_in_use(run.lock_path, run.path)
                raise UserError(f"{run.path}: run folder already exists; "
                                f"use 'testbed resume {run.path}' or another --run-dir")
            run.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            run.lock()
            atomic_write(run.config_path, yaml.safe_dump(resolved_config, sort_keys=False).encode())
            atomic_write(run.overrides_path, yaml.safe_dump(list(overrides)).encode())
            if source is not None:
                atomic_write(run.source_path, source.encode())
            run.metrics_path.touch()
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        """Open an existing run folder (for resume and report)."""
        run = cls(path)
        if not run.config_path.is_file():
            raise UserError(f"{run.path}: not a run folder (no config.yaml)")
        return run

    def lock(self) -> None:
        """Become the folder's one writer until `unlock` (or this object is collected, or the
        process exits); a `UserError` naming the pid of another testbed process that is."""
        if self._lock is not None or fcntl is None:
            return
        with self._writing(LOCK_FILE):
            key = _acquire_lock(self.lock_path, self.path)
        self._lock = weakref.finalize(self, _release_lock, key)

    def unlock(self) -> None:
        """Let another process write the folder."""
        if self._lock is not None:
            self._lock()
            self._lock = None

    @property
    def completed(self) -> bool:
        return self.summary_path.is_file()

    def read_overrides(self) -> list[str]:
        """The ``--set`` overrides the run was started with (none for folders made before they were kept)."""
        if not self.overrides_path.is_file():
            return []
        return [str(o) for o in yaml.safe_load(self.overrides_path.read_text()) or []]

    def read_source(self) -> str | None:
        """The scenario file the run was started from (None for folders made before it was kept)."""
        return self.source_path.read_text() if self.source_path.is_file() else None

    def title(self) -> str:
        """The run as resolved: the scenario's name and the overrides that changed it."""
        name = str(self.read_config().get("name", self.path.name))
        overrides = self.read_overrides()
        return f"{name} ({', '.join(overrides)})" if overrides else name

    def read_config(self) -> dict[str, Any]:
        """The resolved scenario; a config.yaml that was damaged or edited into something else is a
        `UserError` naming it."""
        try:
            config = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as err:
            reason = getattr(err, "strerror", None) or getattr(err, "problem", None) or type(err).__name__
            raise UserError(f"{self.config_path}: cannot read the run's resolved scenario: {reason}") from None
        if not isinstance(config, dict):
            raise UserError(f"{self.config_path}: not a scenario mapping (got {type(config).__name__}); "
                            "the run folder's config.yaml was damaged")
        return config

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
            atomic_write(path, lambda handle: _torch_save(checkpoint, handle), tmp_prefix=".ckpt.")
        for old in self._checkpoints()[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        return path

    def latest_checkpoint(self) -> dict[str, Any] | None:
        """The newest checkpoint, loaded with torch's safe (weights-only) unpickler."""
        checkpoints = self._checkpoints()
        if not checkpoints:
            return None
        try:
            import torch

            return torch.load(checkpoints[-1], weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:  # foreign, forged or torn
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{checkpoints[-1]}: not a checkpoint this testbed can load safely "
                            f"(refused: {reason[:200]})") from None

    @property
    def latest_step(self) -> int | None:
        """The step of the newest checkpoint, from its file name (without loading it)."""
        try:
            checkpoints = self._checkpoints()
        except OSError:
            return None
        return int(checkpoints[-1].stem.split("-")[1]) if checkpoints else None

    @property
    def has_checkpoint(self) -> bool:
        """Whether the folder holds a checkpoint (without loading it)."""
        try:
            return bool(self._checkpoints())
        except OSError:
            return False

    def _checkpoints(self) -> list[Path]:
        return sorted(self.checkpoint_dir.glob("ckpt-*.pt")) if self.checkpoint_dir.is_dir() else []

    # artifacts -----------------------------------------------------------------------------
    def write_artifacts(self, arrays: Mapping[str, ArrayLike]) -> None:
        """Save a workload's report arrays (numpy's format: no pickles)."""
        buffer = io.BytesIO()
        # numpy's stub: mypy cannot rule out a key "allow_pickle" among the arrays' names
        np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
        with self._writing(self.artifacts_path.name):
            atomic_write(self.artifacts_path, buffer.getvalue())

    def read_artifacts(self) -> dict[str, np.ndarray]:
        if not self.artifacts_path.is_file():
            return {}
        with np.load(self.artifacts_path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}

    # other per-step records (a federated run's clients.jsonl) ------------------------------
    def append_record(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON line to the folder's ``name`` file and force it to disk, as metrics.jsonl."""
        with self._writing(name), open(self.path / name, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read_records(self, name: str) -> list[dict[str, Any]]:
        """The complete lines of the folder's ``name`` file ([] without one); a torn line ends it."""
        path = self.path / name
        if not path.is_file():
            return []
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line torn by a crash mid-write
        return records

    def keep_records(self, name: str, keep: Callable[[dict[str, Any]], bool]) -> None:
        """Rewrite ``name`` with the complete records ``keep`` accepts (a resumed run's rewind);
        an unchanged file is left as it is."""
        path = self.path / name
        if not path.is_file():
            return
        text = "".join(json.dumps(r) + "\n" for r in self.read_records(name) if keep(r)).encode()
        if text != path.read_bytes():
            with self._writing(name):
                atomic_write(path, text)

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
            try:
                checkpoints = self._checkpoints()
            except OSError:  # the folder itself is gone or unreadable
                checkpoints = []
            if checkpoints:
                advice = (f"the last good checkpoint, checkpoints/{checkpoints[-1].name}, is intact: fix the "
                          f"cause, then 'testbed resume {self.path}'")
            else:
                advice = "no checkpoint had been written yet"
            raise UserError(f"{self.path}: cannot write {what}: {reason}; {advice}") from None
