"""Audits that a workload offers to every kind: a measurement of a run's final model that a scenario
switches on with a block of its ``report:`` (``report: {kind: robustness, ood: {...}}``).

A plugin's workload declares the audits it offers on its class (``audits = {"ood": OodAudit}``, see
`testbed.workloads.base.Workload`), a built-in workload in its torch-free config module (``AUDITS =
{"ood": "testbed.workloads.oodrobust.audit:OodAudit"}``, which its class takes); `find_audit` looks
an audit up by name through the workloads registry (`testbed.workloads.registry.audits`), so no
second table lists them, neither the schema nor a kind names a paper, and finding a built-in audit
imports its own module, not the workload's model code (torch). The audit
carries all that is its own: its typed ``Config`` (the loader validates the report block against
it, `testbed.loading.with_audits`), the kinds and the report kind it serves, a `check` that needs
no workers, `run` on a final model, and the report ``section`` that renders what `run` recorded.
A kind's runner calls `check_audits` from its own check and `run_audits` on its final model, with the
data that model was trained on: an audit that declares `Audit.needs_members` (membership inference)
gets it as ``members=`` and the scenario as ``scenario=`` (its `check` the scenario too), to train
shadow models the scenario's way.
"""

from __future__ import annotations

import html
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.errors import ScenarioError
from testbed.report.sections import ReportSection
from testbed.scenario import ReportConfig

if TYPE_CHECKING:
    import numpy as np
    import torch

    from testbed.config import StrictModel
    from testbed.data import Dataset
    from testbed.data.config import DataConfig
    from testbed.report.render import RunData
    from testbed.runner import RunContext
    from testbed.scenario import Scenario
    from testbed.seeding import SeedTree


class Audit(ABC):
    """One audit of a final model, as a workload offers it; its name is the ``report:`` key that
    switches it on."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]]
    # The scenario kinds whose final model the audit measures, and the report kind that shows it.
    kinds: ClassVar[tuple[str, ...]]
    report_kind: ClassVar[str]
    section: ClassVar[ReportSection]
    # Whether `run` also takes ``members=`` (the final model's training data, as a `Dataset`) and
    # ``scenario=`` (the `Scenario` run) as keywords, and `check` ``scenario=``; an audit of the model
    # alone (OOD) does not.
    needs_members: ClassVar[bool] = False

    @classmethod  # noqa: B027  (an audit may accept any data)
    def check(cls, config: Any, data: DataConfig) -> None:
        """Refuse data the audit cannot measure (raise ValueError saying why), without workers."""

    @classmethod
    @abstractmethod
    def run(cls, model: torch.nn.Module, test_set: Dataset, config: Any,
            seeds: SeedTree) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """Measure ``model`` on ``test_set``: (final metrics, report arrays for `section`)."""


def offered_audits() -> list[str]:
    """The name of every audit a registered workload offers, in the registry's order (imports no audit)."""
    from testbed.workloads import registry

    names = (name for workload in registry.workload_names() for name in registry.audit_names(workload))
    return list(dict.fromkeys(names))


def find_audit(name: str) -> type[Audit] | None:
    """The audit ``name`` as the first registered workload that offers it declares it (no other
    workload's audits are imported)."""
    from testbed.workloads import registry

    for workload in registry.workload_names():
        if name in registry.audit_names(workload):
            audit = registry.audits(workload)[name]
            if not (isinstance(audit, type) and issubclass(audit, Audit)):
                raise TypeError(f"workload '{workload}' offers as audit '{name}' {audit!r}, which is no Audit subclass")
            return audit
    return None


def switched_on(report: dict[str, Any] | ReportConfig) -> dict[str, tuple[type[Audit], Any]]:
    """Each audit a report block (typed, or as a run folder's config.yaml holds it) switches on, by
    name: the audit and its block."""
    blocks = report.audit_blocks() if isinstance(report, ReportConfig) else {
        name: block for name, block in report.items() if name not in ReportConfig.model_fields and block is not None}
    found = {name: (find_audit(name), block) for name, block in blocks.items()}
    return {name: (audit, block) for name, (audit, block) in found.items() if audit is not None}


def check_audits(scenario: Scenario, source: str) -> None:
    """Each switched-on audit's own `Audit.check` of the scenario's data, as a one-line `ScenarioError`."""
    for name, (audit, block) in switched_on(scenario.report).items():
        extra = {"scenario": scenario} if audit.needs_members else {}
        try:
            audit.check(audit.Config.model_validate(block), scenario.data, **extra)
        except ValueError as err:
            raise ScenarioError(f"{source}: report.{name}: {err}") from None


def run_audits(ctx: RunContext, model: torch.nn.Module, test_set: Dataset,
               members: Dataset | None = None) -> dict[str, float]:
    """Run each switched-on audit on a run's final ``model``: its arrays join the run's artifacts,
    its metrics are returned for the run's final metrics. ``members``: the data ``model`` was
    trained on, for the audits that need it (a kind that has none to give passes None)."""
    metrics: dict[str, float] = {}
    for audit, block in switched_on(ctx.scenario.report).values():
        extra = {"members": members, "scenario": ctx.scenario} if audit.needs_members else {}
        # A worker's copy of the scenario holds the block as written; the loader's, the typed config.
        found, arrays = audit.run(model, test_set, audit.Config.model_validate(block), ctx.seeds, **extra)
        ctx.run.write_artifacts({**ctx.run.read_artifacts(), **arrays})
        metrics.update(found)
    return metrics


class AuditSections(ReportSection):
    """The report sections of the audits a run switched on, each under its own heading (a kind's
    report layout lists this one section for every audit a workload may offer)."""

    title = ""  # each audit's section brings its own heading

    def render(self, data: RunData, out_dir: Path) -> str:
        parts = []
        for audit, _ in switched_on(data.config.get("report") or {}).values():
            body = audit.section.render(data, out_dir)
            if body:  # the audit recorded nothing (an older run): leave its heading out too
                parts.append(f"<h2>{html.escape(audit.section.title)}</h2>{body}")
        return "".join(parts)
