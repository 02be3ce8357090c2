"""Progress bars for long work (rich), silent under ``--quiet``, in CI and when not on a terminal."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def progress_enabled(quiet: bool) -> bool:
    """Bars only for a person watching a terminal."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()


class ProgressReporter:
    """Hands runners a bar to advance; a no-op when disabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    @contextmanager
    def task(self, description: str, total: int, completed: int = 0) -> Iterator[Callable[[int], None]]:
        """Yield ``advance(n)`` for a bar of ``total`` units that starts at ``completed``."""
        # Named functions, not lambdas: mypy cannot infer a lambda with a default argument.
        if not self.enabled:
            def ignore(n: int = 1) -> None:
                return None

            yield ignore
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, transient=True) as bar:
            task_id = bar.add_task(description, total=total, completed=completed)

            def advance(n: int = 1) -> None:
                bar.advance(task_id, n)

            yield advance
