"""The runner interface: what a scenario kind must provide to be run, resumed and validated."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from testbed.engines import Engine
from testbed.progress import ProgressReporter
from testbed.run import RunFolder
from testbed.scenario import Scenario

RUNNERS: dict[str, "Runner"] = {}


def register(runner_cls: type["Runner"]) -> type["Runner"]:
    """Class decorator adding a runner instance to `RUNNERS` under its ``kind``."""
    RUNNERS[runner_cls.kind] = runner_cls()
    return runner_cls


@dataclass
class RunContext:
    """What a runner gets: the scenario, its folder, an engine, a progress bar and a metrics sink."""

    scenario: Scenario
    run: RunFolder
    engine: Engine
    progress: ProgressReporter
    log_metrics: Callable[[dict[str, Any]], None]


class Runner(ABC):
    """Runs one kind of scenario from a fresh start or from the run folder's last checkpoint."""

    kind: ClassVar[str]
    engines: ClassVar[tuple[str, ...]] = ("local", "ray")  # the engine types this kind runs on

    def check(self, scenario: Scenario, source: str) -> None:
        """Validation beyond the schema that needs no workers (raise `ScenarioError`)."""

    def parallel_tasks(self, scenario: Scenario) -> int:
        """How many tasks the run keeps busy at once; decides whether ``local`` starts Ray."""
        return 1

    @abstractmethod
    def run(self, ctx: RunContext) -> dict[str, Any]:
        """Run (or continue) the scenario; return the final metrics for summary.json."""
