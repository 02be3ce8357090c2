"""The runner interface: what a scenario kind provides to be validated, run and resumed.

A kind is one package (``testbed/workloads``, ``testbed/federated``, ``testbed/decentralized``,
``testbed/pretrain``) whose ``runner`` module defines a `Runner`; `testbed.kinds` lists them. A
runner says which engine capabilities it needs (`needs_one_of`), and uses only the `Engine`
primitives: it never asks which engine it runs on. This module imports nothing above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from testbed.engines.base import Engine
    from testbed.progress import ProgressReporter
    from testbed.report.audit_page import Finding
    from testbed.report.render import RunData
    from testbed.report.sections import ReportSection
    from testbed.run import RunFolder
    from testbed.scenario import Scenario
    from testbed.seeding import SeedTree


@dataclass
class RunContext:
    """What a runner gets: the scenario, its folder, an engine, a progress bar, a metrics sink, the
    file its messages name (the scenario file; a resumed run's config.yaml), and ``seeds``, the
    run's seed tree, built once from the scenario's root seed (runners hand it, or a child of it,
    down instead of building their own; see `testbed.seeding`). What the runner
    puts in ``timings`` (throughput and the like) goes to summary.json's ``timings``: the final
    metrics `Runner.run` returns are the numbers a resumed run reproduces, so they hold no timing."""

    scenario: Scenario
    run: RunFolder
    engine: Engine
    progress: ProgressReporter
    log_metrics: Callable[[dict[str, Any]], None]
    source: str = ""
    timings: dict[str, Any] = field(default_factory=dict)
    seeds: SeedTree = field(init=False)

    def __post_init__(self) -> None:
        from testbed.seeding import SeedTree  # here, not at the top: importing the interface imports no torch

        # Strict: a stream the run draws must be declared, with its purpose (`testbed.seeding.stream`).
        self.seeds = SeedTree(self.scenario.seed, strict=True)


class Runner(ABC):
    """Runs one kind of scenario from a fresh start or from the run folder's last checkpoint."""

    kind: ClassVar[str]
    # The engine capabilities of which the kind needs at least one (see `testbed.engines.config`).
    needs_one_of: ClassVar[frozenset[str]] = frozenset({"tasks"})

    def check(self, scenario: Scenario, source: str) -> None:  # noqa: B027  (no checks by default)
        """Validation beyond the schema that needs no workers (raise `ScenarioError`)."""

    def parallel_tasks(self, scenario: Scenario) -> int:
        """How many tasks the run keeps busy at once; decides whether ``local`` starts Ray."""
        return 1

    def report_sections(self, config: dict[str, Any]) -> list[ReportSection]:
        """The kind's own sections of the report of a run with the resolved scenario ``config``."""
        return []

    def audit_findings(self, data: RunData) -> list[Finding]:
        """The rows of the auditor's page (`testbed.report.audit_page`): each privacy or robustness
        promise of the run's scenario and what the run measured of it; none by default."""
        return []

    def kept_across_runs(self) -> AbstractContextManager[None]:
        """What the runs of one process may share while the block is open (`testbed.sweep_shared`:
        a sweep's variants run one after another in one process); nothing by default."""
        return nullcontext()

    @abstractmethod
    def run(self, ctx: RunContext) -> dict[str, Any]:
        """Run (or continue) the scenario; return the final metrics for summary.json."""
