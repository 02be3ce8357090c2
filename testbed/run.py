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
leaves the newest good checkpoint in place for `testbed resume` once the cause is fixed. A run that
fails before its first checkpoint removes what it wrote (`remove_written`): the folder where it made
it, only the files inside where the folder was there already (a user's empty ``--run-dir``, or a
link to one).

Reading trusts nothing in the folder: resume and report open its files only as plain files
(`open_plain`: a symbolic link, which could lead out of the folder, a folder, FIFO or device in a
file's place is refused without waiting on it), load checkpoints with torch's weights-only
unpickler and check their step and record count, and read JSON that is too deep to parse or not
an object as what it is. Each is a `UserError`: one line naming the file, exit code 2.

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
import re
import shutil
import stat
import tempfile
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import yaml
from numpy.typing import ArrayLike

from testbed.errors import UserError, shorten

KEEP_CHECKPOINTS = 2
LOCK_FILE = ".lock"
CHECKPOINT_NAME = re.compile(r"ckpt-[0-9]+\.pt\Z")

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


def open_plain(path: Path) -> BinaryIO:
    """Open the run folder's file ``path`` for reading; anything but a plain file is a `UserError`
    naming it: a symbolic link (which could lead out of the run folder), a folder, or a FIFO or
    device (whose read would wait for a writer that never comes)."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise UserError(f"{path}: a symbolic link, not a file of the run folder; the run folder was altered")
        # O_NOFOLLOW, O_NONBLOCK: a link or FIFO put in its place since is refused, not followed or waited on
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{path}: not a plain file (a folder, FIFO or device); the run folder was altered")
    return os.fdopen(fd, "rb")


def parse_record(path: Path, text: bytes, line: int | None = None) -> dict[str, Any]:
    """The JSON object ``text`` read from the run folder's ``path`` (at ``line``); JSON nested too
    deeply for the parser, a number past Python's digit limit, or another value than an object is
    a `UserError` naming the file. (Malformed JSON is a `json.JSONDecodeError`, left to the caller:
    in a ``.jsonl`` file it is a line torn by a crash.)"""
    where = f"{path}" + (f", line {line}" if line is not None else "")
    try:
        value = json.loads(text)
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply to read; the run folder was altered") from None
    except json.JSONDecodeError:
        raise
    except ValueError as err:  # not UTF-8, or an integer of more digits than Python converts
        raise UserError(f"{where}: not readable JSON ({str(err)[:120]}); the run folder was altered") from None
    if not isinstance(value, dict):
        raise UserError(f"{where}: not a JSON object (got {type(value).__name__}); the run folder was altered")
    return value


def _load_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at ``path``, loaded with torch's safe (weights-only) unpickler from a plain
    file; a file it refuses, or that lacks the step and record count every checkpoint holds, is
    a `UserError` naming it."""
    import torch

    with open_plain(path) as handle:
        try:
            with warnings.catch_warnings():
                # torch warns (three lines) before it refuses a file not in its zip format: the refusal is the one line
                warnings.simplefilter("ignore")
                checkpoint = torch.load(handle, weights_only=True)
        except Exception as err:  # a foreign, forged or torn file makes torch's reader raise nearly anything
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"{path}: not a checkpoint this testbed can load safely "
                            f"(refused: {reason[:200]})") from None
    for key in ("step", "metrics_count"):
        value = checkpoint.get(key) if isinstance(checkpoint, dict) else None
        if type(value) is not int or value < 0:
            raise UserError(f"{path}: not a checkpoint of this testbed ({key!r} is {shorten(value)}, not a count); "
                            "the run folder was altered")
    return checkpoint


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
        self.made_folder = False  # whether `create` made the folder (else it was the user's, empty)

    @classmethod
    def create(cls, path: str | Path, resolved_config: dict[str, Any], overrides: Sequence[str] = (),
               source: str | None = None) -> RunFolder:
        """Make a new run folder (started from the scenario file ``source``, where there is one); an
        existing non-empty folder is refused."""
        run = cls(path)
        with run._writing("the run folder"):  # even a look can fail: a name too long, a folder not ours
            if run.path.exists() and not run.path.is_dir():
                raise UserError(f"{run.path}: exists and is not a folder; use another --run-dir")
            run.made_folder = not run.path.exists()
            if not run.made_folder and any(run.path.iterdir()):
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
        try:
            found = run.config_path.is_file()
        except OSError as err:  # a name too long, a folder we may not read
            raise UserError(f"{run.path}: cannot open the run folder: {err.strerror or err}") from None
        if not found:
            raise UserError(f"{run.path}: not a run folder (no config.yaml)")
        return run

    def remove_written(self) -> None:
        """Remove what this run wrote, for a run that failed before its first checkpoint: the folder
        where `create` made it; in a folder that was there (the user's empty ``--run-dir``, or a
        link to one) only the files inside, keeping the folder and the link."""
        if self.made_folder:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        try:
            children = list(self.path.iterdir())
        except OSError:  # gone already, or no longer ours to read
            return
        for child in children:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

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
        return self.read_records(self.metrics_path.name)

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
        """The newest checkpoint, loaded with torch's safe (weights-only) unpickler (`_load_checkpoint`)."""
        path = self.latest_checkpoint_path()
        return None if path is None else _load_checkpoint(path)

    def latest_checkpoint_path(self) -> Path | None:
        """The file of the newest checkpoint (None without one); a checkpoints folder that is a link is
        a `UserError`, as nothing a run reads may lead out of its folder."""
        if self.checkpoint_dir.is_symlink():
            raise UserError(f"{self.checkpoint_dir}: a symbolic link, not the run's checkpoints folder; "
                            "the run folder was altered")
        checkpoints = self._checkpoints()
        return checkpoints[-1] if checkpoints else None

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
        if not self.checkpoint_dir.is_dir():
            return []
        return sorted(path for path in self.checkpoint_dir.glob("ckpt-*.pt") if CHECKPOINT_NAME.match(path.name))

    # artifacts -----------------------------------------------------------------------------
    def write_artifacts(self, arrays: Mapping[str, ArrayLike]) -> None:
        """Save a workload's report arrays (numpy's format: no pickles)."""
        buffer = io.BytesIO()
        # numpy's stub: mypy cannot rule out a key "allow_pickle" among the arrays' names
        np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
        with self._writing(self.artifacts_path.name):
            atomic_write(self.artifacts_path, buffer.getvalue())

    def read_artifacts(self) -> dict[str, np.ndarray]:
        """The arrays of artifacts.npz ({} without one); a file numpy cannot read without pickles is a
        `UserError` naming it."""
        if not os.path.lexists(self.artifacts_path):
            return {}
        with open_plain(self.artifacts_path) as handle:
            try:
                with np.load(handle, allow_pickle=False) as data:
                    return {key: data[key] for key in data.files}
            except Exception as err:  # object arrays, a torn or foreign zip, a bare .npy: numpy raises many types
                raise UserError(f"{self.artifacts_path}: not an archive of plain arrays ({str(err)[:160]}); "
                                "the run folder was altered") from None

    # other per-step records (a federated run's clients.jsonl) ------------------------------
    def append_record(self, name: str, record: dict[str, Any]) -> None:
        """Append one JSON line to the folder's ``name`` file and force it to disk, as metrics.jsonl."""
        with self._writing(name), open(self.path / name, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def read_records(self, name: str) -> list[dict[str, Any]]:
        """The complete lines of the folder's ``name`` file ([] without one); a torn line ends it. A
        line that is valid JSON but no record (nested too deeply to read, not an object) is a
        `UserError` naming the file and line."""
        path = self.path / name
        if not os.path.lexists(path):
            return []
        with open_plain(path) as handle:
            lines = handle.read().splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            try:
                records.append(parse_record(path, line, number))
            except json.JSONDecodeError:
                break  # a line torn by a crash mid-write; resume rewrites from the checkpoint
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
        """summary.json (None before the run completed); one that is not a JSON object is a `UserError`."""
        if not self.completed:
            return None
        with open_plain(self.summary_path) as handle:
            text = handle.read()
        try:
            return parse_record(self.summary_path, text)
        except json.JSONDecodeError as err:
            raise UserError(f"{self.summary_path}: not valid JSON ({err}); the run folder was altered") from None

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
