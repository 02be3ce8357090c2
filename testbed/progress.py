"""Progress bars for long work (rich), silent under ``--quiet``, in CI and when not on a terminal.

Each bar names its arm (the strategy of a federated run, "baseline fedavg" for a baseline, the
scenario otherwise) and shows the latest headline metric of the records it is advanced with::

    sdea rounds             ━━━━━━━━━━━━━━━━━━━━━━━━━   4/10  test_accuracy 0.4125  0:00:31
    baseline fedavg rounds  ━━━━━━━━━━━━━━━━━━━━━━━━━   1/10  test_accuracy 0.0833  0:01:02
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from testbed.scenario import Scenario

# The metric a bar shows when its runner names none: the first of these a record has.
HEADLINE_METRICS = ("test_accuracy", "accuracy", "test_loss", "loss", "train_loss")


class Advance(Protocol):
    """``advance(n, record)``: move a bar ``n`` units on; ``record`` (a metrics record) updates its metric."""

    def __call__(self, n: int = 1, record: Mapping[str, Any] | None = None) -> None: ...


def progress_enabled(quiet: bool) -> bool:
    """Bars only for a person watching a terminal."""
    return not quiet and not os.environ.get("CI") and sys.stderr.isatty()


def arm_name(scenario: Scenario) -> str:
    """What a run's bars are labelled with: a federated run's strategy, otherwise the scenario's name."""
    if scenario.kind == "federated" and scenario.federated is not None:
        return str(scenario.federated.strategy.name)
    return scenario.name


def headline(record: Mapping[str, Any], metric: str | None = None) -> str:
    """``"test_accuracy 0.4125"``: the named (or first headline) numeric metric of a record, or ``""``."""
    for key in (metric,) if metric else HEADLINE_METRICS:
        value = record.get(key) if key else None
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return f"{key} {value:.4g}"
    return ""


class ProgressReporter:
    """Hands runners a bar to advance; a no-op when disabled.

    ``console`` is where bars draw (rich's default: the terminal's stderr); tests pass one that
    records to a string.
    """

    def __init__(self, enabled: bool, arm: str = "", console: Console | None = None):
        self.enabled = enabled
        self.arm = arm
        self.console = console

    def for_arm(self, arm: str) -> ProgressReporter:
        """The same reporter, its bars labelled ``arm`` (a baseline beside the main run)."""
        return ProgressReporter(self.enabled, arm, self.console)

    @contextmanager
    def task(self, description: str, total: int, completed: int = 0, metric: str | None = None) -> Iterator[Advance]:
        """Yield ``advance(n, record)`` for a bar of ``total`` units that starts at ``completed``;
        the bar shows ``metric`` (default: the first of `HEADLINE_METRICS`) of the latest record."""
        # Named functions, not lambdas: mypy cannot infer a lambda with a default argument.
        if not self.enabled:
            def ignore(n: int = 1, record: Mapping[str, Any] | None = None) -> None:
                return None

            yield ignore
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[metric]}"), TimeRemainingColumn())
        label = f"{self.arm} {description}" if self.arm else description
        with Progress(*columns, transient=True, console=self.console) as bar:
            task_id = bar.add_task(label, total=total, completed=completed, metric="")

            def advance(n: int = 1, record: Mapping[str, Any] | None = None) -> None:
                shown = headline(record, metric) if record is not None else ""
                if shown:  # a record without the metric keeps the last one shown
                    bar.update(task_id, metric=shown)
                bar.advance(task_id, n)

            yield advance
