"""Report sections, and the layout a report kind adds to the generic page.

A section turns a run's data into an HTML fragment (and any PNGs it needs). Every page has the
generic sections below (summary, metric curves, scenario); a report kind adds its own through a
`ReportLayout` that its package exports and `testbed.kinds.REPORT_LAYOUTS` names.
"""

from __future__ import annotations

import html
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from testbed.report.plots import image, numeric_series, plot_curve, safe_name, x_axis

if TYPE_CHECKING:
    from testbed.report.render import RunData

class ReportSection(ABC):
    """One titled part of a report page."""

    title: str = ""

    @abstractmethod
    def render(self, data: RunData, out_dir: Path) -> str:
        """Return the section's HTML body (empty: the run has nothing for it, leave it out);
        write any images into ``out_dir``."""


class ArraySection(ReportSection):
    """A section drawn from the run's report arrays (artifacts.npz). When the run did not record
    the arrays it ``requires`` the section shows ``missing`` (by default: it is left out of the
    page). Subclasses implement `body`."""

    requires: tuple[str, ...] = ()
    missing: str = ""

    def render(self, data: RunData, out_dir: Path) -> str:
        if any(key not in data.artifacts for key in self.requires):
            return self.missing
        return self.body(data.artifacts, data, out_dir)

    @abstractmethod
    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        """The section's HTML, given that every required array is present."""


@dataclass(frozen=True)
class ReportLayout:
    """The sections a report kind adds: right below the summary (its own findings, first) and
    after the generic metric curves."""

    after_summary: tuple[ReportSection, ...] = ()
    after_metrics: tuple[ReportSection, ...] = ()


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    """An HTML table with escaped cells; floats shown with 4 significant digits."""
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class SummarySection(ReportSection):
    """Final metrics, status, seed and timings."""

    title = "Summary"

    def render(self, data: RunData, out_dir: Path) -> str:
        summary = data.summary or {}
        status = "completed" if data.summary else "incomplete (resume with testbed resume)"
        rows = [("status", status), ("kind", data.config.get("kind", "")), ("seed", data.config.get("seed", ""))]
        rows += [(k, v) for k, v in sorted(summary.get("final_metrics", {}).items())]
        rows += [(f"time: {k}", v) for k, v in sorted(summary.get("timings", {}).items())]
        return table(rows, ("item", "value"))


class MetricCurvesSection(ReportSection):
    """A curve of every numeric metric in metrics.jsonl."""

    title = "Metrics"

    def render(self, data: RunData, out_dir: Path) -> str:
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

    def render(self, data: RunData, out_dir: Path) -> str:
        text = yaml.safe_dump(data.config, sort_keys=False)
        versions = json.dumps((data.summary or {}).get("versions", {}), indent=1)
        return f"<pre>{html.escape(text)}</pre><p>Versions: <code>{html.escape(versions)}</code></p>"

