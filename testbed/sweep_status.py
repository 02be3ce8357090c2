"""What a running sweep shows: each variant queued, running, done or failed, with its current metric.

Variants may run as Ray tasks on other nodes (`testbed.sweep`), so nothing here waits for a call
back from them: a thread of the sweep process reads the variant folders about once a second.

* no folder, or no ``config.yaml``: queued (also a folder left unfinished by an earlier sweep
  until its resumed process takes the folder's lock, which rewrites ``.lock``);
* ``config.yaml`` and no ``summary.json``: running; the current metric is that of the last record
  of ``metrics.jsonl`` (only the file's tail is read);
* ``summary.json``: done, with the final metric;
* the failure marker ``variants/<slug>.failed.json`` that `testbed.sweep.run_variant` writes, or a
  failed result of the engine's ``map``: failed.

On a terminal (see `testbed.progress.progress_enabled`) the variants are a live `rich` table on
stderr; otherwise, unless ``--quiet``, one plain line per variant as it ends, so that a CI log
shows the sweep's progress::

    [3/4] done    strategy=fedavg,seed=1  test_accuracy 0.912  (41 s)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from testbed.progress import progress_enabled

HEADLINE_METRICS = ("test_accuracy", "accuracy", "test_loss", "loss")
POLL_S = 1.0  # how often the folders are read
TAIL_BYTES = 16_384  # of metrics.jsonl, read from its end (more only for a longer last record)
MAX_ROWS = 30  # rows of the live table; the rest are counted in its caption
FAILED_SUFFIX = ".failed.json"

State = Literal["queued", "running", "done", "failed"]
Mode = Literal["live", "lines", "off"]
STATE_ORDER: dict[str, int] = {"running": 0, "failed": 1, "done": 2, "queued": 3}  # rows of the live table
STATE_STYLE = {"queued": "dim", "running": "cyan", "done": "green", "failed": "bold red"}


def failure_marker(folder: Path) -> Path:
    """Where a variant's failed result is kept beside its folder (``variants/<slug>.failed.json``)."""
    return folder.with_name(folder.name + FAILED_SUFFIX)


def display_mode(quiet: bool) -> Mode:
    """A live table for a person at a terminal, plain lines for a log, nothing under ``--quiet``."""
    if progress_enabled(quiet):
        return "live"
    return "off" if quiet else "lines"


@dataclass(frozen=True)
class VariantStatus:
    """One variant as its folder (or its result) shows it now."""

    slug: str
    state: State
    progress: str = ""  # "round 3" or "step 40": where the last record is
    metric: str = ""
    value: float | None = None
    error: str = ""
    wall_s: float | None = None  # a done variant's own wall time, from its summary

    def metric_text(self) -> str:
        """``test_accuracy 0.912``, or nothing before the first record."""
        return f"{self.metric} {self.value:.4g}" if self.metric and self.value is not None else ""


def last_record(path: Path) -> dict[str, Any] | None:
    """The last complete JSON record of a JSONL file, reading only its tail (a torn last line,
    from a writer that is mid-append, is skipped)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            window = TAIL_BYTES
            while True:
                start = max(0, size - window)
                handle.seek(start)
                lines = handle.read(size - start).splitlines()
                if start > 0:
                    lines = lines[1:]  # the first line of the window may start mid-record
                for line in reversed(lines):
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        return record
                if start == 0:
                    return None
                window *= 4
    except OSError:
        return None


def headline(values: dict[str, Any], preferred: tuple[str, ...]) -> tuple[str, float | None]:
    """The first of ``preferred`` (the sweep's own metrics, then `HEADLINE_METRICS`) that
    ``values`` holds as a number."""
    for name in (*preferred, *HEADLINE_METRICS):
        value = values.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return name, float(value)
    return "", None


def read_status(folder: Path, preferred: tuple[str, ...] = (), stale_lock: float | None = None) -> VariantStatus:
    """Classify one variant folder (see the module docstring). ``stale_lock``: the mtime of the
    folder's ``.lock`` when the sweep began, for a folder an earlier sweep left unfinished."""
    slug = folder.name
    summary = _read_json(folder / "summary.json")
    if summary is not None:
        name, value = headline(summary.get("final_metrics") or {}, preferred)
        wall = (summary.get("timings") or {}).get("wall_s")
        return VariantStatus(slug, "done", metric=name, value=value,
                             wall_s=float(wall) if isinstance(wall, int | float) else None)
    failed = _read_json(failure_marker(folder))
    if failed is not None:
        return VariantStatus(slug, "failed", error=str(failed.get("error", "")))
    if not (folder / "config.yaml").is_file() or (stale_lock is not None and _mtime(folder / ".lock") == stale_lock):
        return VariantStatus(slug, "queued")
    record = last_record(folder / "metrics.jsonl") or {}
    axis = "round" if "round" in record else "step"
    name, value = headline(record, preferred)
    return VariantStatus(slug, "running", progress=f"{axis} {record[axis]}" if axis in record else "",
                         metric=name, value=value)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # absent, or caught mid-rename on a filesystem without atomic renames
        return None
    return data if isinstance(data, dict) else None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class SweepMonitor:
    """Reads the variant folders from a thread and shows them (`display_mode`); a context manager
    whose exit stops and joins the thread, so that none outlives the sweep.

    `poll` is one pass (the thread's, callable directly); `close` ends the display with the
    engine's results, which settle the variants that failed without leaving a marker.
    """

    def __init__(self, variants_dir: Path, slugs: list[str], mode: Mode, preferred: tuple[str, ...] = (),
                 stream: TextIO | None = None, interval: float = POLL_S):
        self.variants_dir = variants_dir
        self.slugs = list(slugs)
        self.mode = mode
        self.preferred = preferred
        self.stream = stream or sys.stderr
        self.interval = interval
        self.statuses: dict[str, VariantStatus] = {}
        self._started = time.monotonic()
        self._first_running: dict[str, float] = {}
        self._ended: list[str] = []  # in the order they ended: the plain lines' [k/N]
        self._stale = {slug: _mtime(variants_dir / slug / ".lock") for slug in self.slugs
                       if (variants_dir / slug / "config.yaml").is_file()
                       and not (variants_dir / slug / "summary.json").is_file()}
        self._results: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Any = None
        self._closed = False

    def __enter__(self) -> SweepMonitor:
        if self.mode == "off" or not self.slugs:
            return self
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.stream), auto_refresh=False, transient=False)
            self._live.start()
        self.poll()
        self._thread = threading.Thread(target=self._loop, name="sweep-status", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, results: dict[str, dict[str, Any]] | None = None) -> None:
        """Stop the thread, settle the variants with ``results`` (slug -> run_variant's result),
        show them a last time; once."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.mode == "off" or not self.slugs:
            return
        self._results = results or {}
        try:
            self.poll()
        finally:
            if self._live is not None:
                self._live.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except OSError:  # a folder unreadable for a moment (a network filesystem): try again next time
                continue

    def poll(self) -> dict[str, VariantStatus]:
        """Read every variant once, print the lines of those that ended, refresh the table."""
        now = time.monotonic()
        for slug in self.slugs:
            status = self._settled(read_status(self.variants_dir / slug, self.preferred, self._stale.get(slug)))
            if status.state == "running":
                self._first_running.setdefault(slug, now)
            if status.state in ("done", "failed") and slug not in self._ended:
                self._ended.append(slug)
                if self.mode == "lines":
                    self._print_line(status, now)
            self.statuses[slug] = status
        if self._live is not None:
            self._live.update(self.table(now), refresh=True)
        return dict(self.statuses)

    def _settled(self, status: VariantStatus) -> VariantStatus:
        """A failed result from the engine outranks what the folder shows (no summary, maybe no marker)."""
        result = self._results.get(status.slug)
        if result is not None and result.get("status") == "failed" and status.state != "done":
            return VariantStatus(status.slug, "failed", error=str(result.get("error", "")))
        return status

    def _elapsed(self, status: VariantStatus, now: float) -> float | None:
        if status.wall_s is not None:
            return status.wall_s
        since = self._first_running.get(status.slug)
        return now - since if since is not None else None

    def _print_line(self, status: VariantStatus, now: float) -> None:
        elapsed = self._elapsed(status, now)
        parts = [f"[{len(self._ended)}/{len(self.slugs)}]", f"{status.state:<6}", status.slug]
        parts += [status.metric_text()] if status.state == "done" else [status.error]
        if elapsed is not None:
            parts.append(f"({elapsed:.0f} s)")
        print("  ".join(p for p in parts if p), file=self.stream, flush=True)

    def counts(self) -> dict[str, int]:
        """How many variants are in each state."""
        counts = dict.fromkeys(STATE_ORDER, 0)
        for status in self.statuses.values():
            counts[status.state] += 1
        return counts

    def table(self, now: float | None = None) -> Any:
        """The live `rich` table: running and failed variants first."""
        from rich.table import Table
        from rich.text import Text

        now = time.monotonic() if now is None else now
        counts = self.counts()
        title = f"sweep: {len(self.slugs)} variants, " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        table = Table(title=title, title_justify="left")
        for column in ("variant", "state", "at", "metric", "time"):
            table.add_column(column, no_wrap=column != "variant")
        rows = sorted(self.statuses.values(), key=lambda s: STATE_ORDER[s.state])
        for status in rows[:MAX_ROWS]:
            elapsed = self._elapsed(status, now)
            # Text, not markup: an error message may hold brackets that rich would read as styles.
            table.add_row(Text(status.slug), Text(status.state, style=STATE_STYLE[status.state]), status.progress,
                          Text(status.metric_text() or status.error[:60]),
                          f"{elapsed:.0f} s" if elapsed is not None else "")
        if len(rows) > MAX_ROWS:
            table.caption = f"... and {len(rows) - MAX_ROWS} more"
        return table
