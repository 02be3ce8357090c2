"""Report sections, and which sections each report kind shows.

A section turns a run's data into an HTML fragment (and any PNGs it needs). Scenario kinds extend
the report by registering sections for their report kind; every kind starts with the general
training sections below.
"""

from __future__ import annotations

import html
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from testbed.report.plots import numeric_series, plot_curve, safe_name, x_axis

if TYPE_CHECKING:
    from testbed.report.render import RunData

SECTIONS: dict[str, list["ReportSection"]] = {}


class ReportSection(ABC):
    """One titled part of a report page."""

    title: str = ""

    @abstractmethod
    def render(self, data: "RunData", out_dir: Path) -> str:
        """Return the section's HTML body (empty: the run has nothing for it, leave it out);
        write any images into ``out_dir``."""


def register_section(report_kind: str, section: ReportSection, after_summary: bool = False) -> None:
    """Add a section to the reports of one kind ("training", "robustness", ...).

    ``after_summary`` places it right below the summary, above the generic metric curves: where a
    kind's own findings belong.
    """
    sections = SECTIONS.setdefault(report_kind, [])
    summaries = sum(isinstance(s, SummarySection) for s in sections)
    sections.insert(summaries, section) if after_summary else sections.append(section)


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    """An HTML table with escaped cells; floats shown with 4 significant digits."""
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image(name: str, alt: str) -> str:
    return f'<figure><img src="{html.escape(name)}" alt="{html.escape(alt)}"></figure>'


class SummarySection(ReportSection):
    """Final metrics, status, seed and timings."""

    title = "Summary"

    def render(self, data: "RunData", out_dir: Path) -> str:
        summary = data.summary or {}
        status = "completed" if data.summary else "incomplete (resume with testbed resume)"
        rows = [("status", status), ("kind", data.config.get("kind", "")), ("seed", data.config.get("seed", ""))]
        rows += [(k, v) for k, v in sorted(summary.get("final_metrics", {}).items())]
        rows += [(f"time: {k}", v) for k, v in sorted(summary.get("timings", {}).items())]
        return table(rows, ("item", "value"))


class MetricCurvesSection(ReportSection):
    """A curve of every numeric metric in metrics.jsonl."""

    title = "Metrics"

    def render(self, data: "RunData", out_dir: Path) -> str:
        if not data.metrics:
            return "<p>No metrics were recorded.</p>"
        axis = x_axis(data.metrics)
        figures = []
        for key, points in sorted(numeric_series(data.metrics).items()):
            name = f"curve-{safe_name(key)}.png"
            plot_curve(out_dir / name, key, axis, {key: points})
            figures.append(image(name, key))
        return '<div class="grid">' + "".join(figures) + "</div>"


class ConfigSection(ReportSection):
    """The resolved scenario, as run."""

    title = "Scenario"

    def render(self, data: "RunData", out_dir: Path) -> str:
        text = yaml.safe_dump(data.config, sort_keys=False)
        versions = json.dumps((data.summary or {}).get("versions", {}), indent=1)
        return f"<pre>{html.escape(text)}</pre><p>Versions: <code>{html.escape(versions)}</code></p>"


for _kind in ("training", "robustness", "privacy", "pretraining"):
    register_section(_kind, SummarySection())
    register_section(_kind, MetricCurvesSection())
