"""The auditor's page: one screen an auditor can sign off, written by ``testbed report RUN --audit``.

What the scenario promised (its privacy and robustness settings), what the run measured against
each promise (the accountant, the audit, the attacks), and for each whether it holds, is violated,
or is too weak to tell; with the commit the run ran at and the command that reruns it. The rows are
the kind's (`testbed.runner.Runner.audit_findings`): this module only lays them out, leading with
the worst status, so that nothing that failed can sit below the fold.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass
from pathlib import Path

from testbed.report.render import STYLE, RunData, RunLineSection
from testbed.report.sections import table
from testbed.run import RunFolder

# From the worst: the order of the page's rows and of its one-line verdict.
STATUSES = ("violated", "too weak to tell", "not measured", "measured", "holds")
AUDIT_PAGE = "audit.html"


@dataclass(frozen=True)
class Finding:
    """One promise of the scenario and what the run measured of it."""

    area: str  # what it is about: "privacy (accountant)", "privacy (canary audit)", "robustness"
    promised: str
    measured: str
    status: str  # one of STATUSES

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status: one of {list(STATUSES)}, got {self.status!r}")


def verdict_line(findings: list[Finding]) -> str:
    """The page's first sentence: the worst status and how many findings have each."""
    if not findings:
        return "Nothing to audit: the scenario makes no privacy or robustness promise (no privacy block, no attack)."
    counts = {status: sum(f.status == status for f in findings) for status in STATUSES}
    said = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    worst = next(status for status in STATUSES if counts[status])
    lead = {"violated": "Do not sign off: a promise is violated",
            "too weak to tell": "Not enough evidence to sign off: a measurement is too weak to test its promise",
            "not measured": "Partly measured: a promise has no measurement in this run",
            "measured": "Measured, nothing to hold it against", "holds": "Every promise holds"}[worst]
    return f"{lead} ({said})."


def rerun_command(data: RunData) -> str:
    """The command that reruns the run: its scenario file and overrides (from summary.json)."""
    source = (data.summary or {}).get("source") or {}
    scenario = source.get("file") or "SCENARIO.yaml"
    overrides = " ".join(f"--set {shlex.quote(o)}" for o in source.get("overrides") or [])
    return f"testbed run {shlex.quote(str(scenario))}" + (f" {overrides}" if overrides else "")


def render_audit_page(run: RunFolder, findings: list[Finding]) -> Path:
    """Write ``report/audit.html`` (the report folder must exist: render the report first)."""
    data = RunData.load(run)
    ordered = sorted(findings, key=lambda f: STATUSES.index(f.status))
    rows = [(f.area, f.promised, f.measured, f.status) for f in ordered]
    title = f"{run.title()}: audit summary"
    body = (RunLineSection().render(data, run.report_dir)
            + f"<p><b>{html.escape(verdict_line(findings))}</b></p>"
            + (table(rows, ("area", "promised", "measured", "status")) if rows else "")
            + f"<p>Rerun: <code>{html.escape(rerun_command(data))}</code>; the full report: "
              "<a href='index.html'>index.html</a>.</p>")
    escaped = html.escape(title)
    path = run.report_dir / AUDIT_PAGE
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{escaped}</title>"
                    f"<style>{STYLE}</style></head><body><h1>{escaped}</h1>{body}</body></html>")
    return path
