"""Where a run's numbers come from: the testbed checkout's commit, the scenario file and its overrides.

Recorded in every run's ``summary.json`` (``source``) and in the trackers' tags, so that a number
in a report or a reproduction table can be traced to the code and the command that gave it.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from testbed.run import RunFolder


def provenance(run: RunFolder, source: str) -> dict[str, Any]:
    """Where a run's numbers come from: the scenario file it was started from (``source``, the file
    this process read, where the folder does not record one: a resume reads config.yaml), the
    ``--set`` overrides and the commit."""
    commit = source_commit()
    return {"file": run.read_source() or source, "overrides": run.read_overrides(),
            "commit": commit.removesuffix("+dirty") if commit else None,
            "dirty": commit.endswith("+dirty") if commit else None}


@functools.cache
def source_commit() -> str | None:
    """The commit of the testbed checkout that runs (``+dirty`` with uncommitted changes to tracked
    files), or None for an installed package: the reproduction tables say which code gave a number."""
    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
