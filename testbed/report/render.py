"""Assemble a run's report: ``report/index.html`` with its PNG plots beside it."""

from __future__ import annotations

import html
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.sections import (
    ConfigSection,
    FinalValuesSection,
    MetricCurvesSection,
    ReportLayout,
    ReportSection,
    RunLineSection,
)
from testbed.run import RunFolder

STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.6rem;overflow-wrap:anywhere} h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0} td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left}
th{background:#f3f3f3} .grid{display:flex;flex-wrap:wrap;gap:.5rem} figure{margin:0;flex:1 1 45%;min-width:380px}
img{max-width:100%} .runline{color:#555;margin-top:-.4rem} pre{background:#f7f7f7;padding:.7rem;overflow-x:auto}
"""


@dataclass
class RunData:
    """What a report is made from: the run folder's config, metrics and summary."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    summary: dict[str, Any] | None
    artifacts: dict[str, np.ndarray]

    @classmethod
    def load(cls, run: RunFolder) -> RunData:
        return cls(run.path, run.read_config(), run.read_metrics(), run.read_summary(), run.read_artifacts())


def render_report(run: RunFolder, layout: ReportLayout | None = None,
                  extra: Sequence[ReportSection] = ()) -> Path:
    """(Re-)render the report of a run folder; returns the path of index.html.

    The page leads with the answer: the run's line, then the ``layout``'s own findings (a report
    kind's comparison) and the ``extra`` sections that lead (a workload's measure on the paper's
    metric); then the metric curves, the final values, the layout's later sections, the extra
    sections that do not lead, and the scenario as run.
    """
    data = RunData.load(run)
    kind = data.config.get("report", {}).get("kind", "training")
    layout = layout or ReportLayout()
    leading = [s for s in extra if s.leads]
    sections = [RunLineSection(), *layout.after_summary, *leading, MetricCurvesSection(layout.covered),
                FinalValuesSection(), *layout.after_metrics, *[s for s in extra if not s.leads], ConfigSection()]
    title = f"{run.title()}: {kind} report"
    return publish_page(run, title, lambda out_dir: "".join(_section(s, data, out_dir) for s in sections))


def publish_page(run: RunFolder, title: str, build_body: Callable[[Path], str]) -> Path:
    """Write ``report/index.html`` of ``run`` with the body ``build_body(folder)`` returns.

    The body's images are written into a temporary folder that replaces ``report/`` whole only
    once the page is complete, so a failure never leaves a report mixing old and new plots.
    """
    staging = Path(tempfile.mkdtemp(dir=run.path, prefix=".report-"))
    try:
        body = build_body(staging)
        escaped = html.escape(title)
        page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{escaped}</title>"
                f"<style>{STYLE}</style></head><body><h1>{escaped}</h1>{body}</body></html>")
        (staging / "index.html").write_text(page)
        if run.report_dir.exists():
            shutil.rmtree(run.report_dir)
        staging.rename(run.report_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run.report_dir / "index.html"


def _section(section: Any, data: RunData, out_dir: Path) -> str:
    body = section.render(data, out_dir)
    # A section with nothing to show for this run (an audit it did not ask for) is left out.
    if not body:
        return ""
    heading = f"<h2>{html.escape(section.title)}</h2>" if section.title else ""
    return f"<section>{heading}{body}</section>"
