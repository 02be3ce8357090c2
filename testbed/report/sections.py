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

from testbed.report import series
from testbed.report.plots import image, numeric_series, plot_curve, safe_name, x_axis

if TYPE_CHECKING:
    from testbed.report.render import RunData

class ReportSection(ABC):
    """One titled part of a report page. A workload's section ``leads`` (the default): it answers
    the scenario's question and goes before the generic metric curves; one that does not (a
    confusion matrix) goes after them."""

    title: str = ""
    leads: bool = True

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
    """The sections a report kind adds: right below the run's line (its own findings, which answer
    the scenario's question, so they fill the first screen) and after the generic metric curves.
    Metrics in ``covered`` are charted by the kind's sections and left out of the generic curves."""

    after_summary: tuple[ReportSection, ...] = ()
    after_metrics: tuple[ReportSection, ...] = ()
    covered: frozenset[str] = frozenset()


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    """An HTML table with escaped cells; floats shown with 4 significant digits."""
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class RunLineSection(ReportSection):
    """One line on top of the page: status, kind, seed, wall time, engine and the source commit."""

    title = ""  # no heading: the line sits right under the page title

    def render(self, data: RunData, out_dir: Path) -> str:
        summary = data.summary or {}
        status = "completed" if data.summary else "incomplete (resume with <code>testbed resume</code>)"
        parts = [f"<b>{status}</b>", f"kind {html.escape(str(data.config.get('kind', '')))}",
                 f"seed {html.escape(str(data.config.get('seed', '')))}"]
        wall = (summary.get("timings") or {}).get("wall_s")
        if wall is not None:
            parts.append(f"{float(wall):.1f} s wall time")
        engine = (summary.get("engine") or {}).get("type")
        if engine:
            parts.append(f"engine {html.escape(str(engine))}")
        source = summary.get("source") or {}
        if source.get("commit"):
            parts.append(f"commit {html.escape(source['commit'])}" + (" (dirty)" if source.get("dirty") else ""))
        if source.get("overrides"):
            parts.append("overrides " + html.escape(" ".join(source["overrides"])))
        return '<p class="runline">' + " · ".join(parts) + "</p>"


class FinalValuesSection(ReportSection):
    """Every metric's final value (its last record) and the run's timings."""

    title = "Final values (last record)"

    def render(self, data: RunData, out_dir: Path) -> str:
        summary = data.summary or {}
        rows = [(k, v) for k, v in sorted(summary.get("final_metrics", {}).items())]
        rows += [(f"time: {k}", v) for k, v in sorted(summary.get("timings", {}).items())]
        return table(rows, ("metric", "final value")) if rows else ""


def chance_accuracy(data: RunData) -> float | None:
    """A classifier's chance accuracy, 1 / the number of classes, where the run recorded its clients'
    label histograms (a federated run); None elsewhere."""
    histograms = data.artifacts.get("label_histograms")
    if histograms is None or histograms.ndim != 2 or not histograms.shape[1]:
        return None
    return 1.0 / histograms.shape[1]


class MetricCurvesSection(ReportSection):
    """The metrics of metrics.jsonl over training: series of one measure on one chart (train beside
    test, arm beside arm), series that never change in a one-line-each table (`testbed.report.series`).
    Metrics in ``covered`` are left out: the report kind's own sections chart them."""

    title = "Metrics over training"

    def __init__(self, covered: frozenset[str] = frozenset()):
        self.covered = covered

    def render(self, data: RunData, out_dir: Path) -> str:
        if not data.metrics:
            return "<p>No metrics were recorded.</p>"
        axis = x_axis(data.metrics)
        found = {k: v for k, v in numeric_series(data.metrics).items() if k not in self.covered}
        figures: list[str] = []
        used: set[str] = set()
        for chart in series.charts(found):
            stem = chart.names[0] if len(chart.names) == 1 else chart.measure
            name = f"curve-{safe_name(stem)}.png" if f"curve-{safe_name(stem)}.png" not in used else \
                f"curve-{safe_name(stem)}-{len(figures)}.png"
            used.add(name)
            chance = chance_accuracy(data) if chart.measure == "accuracy" else None
            plot_curve(out_dir / name, chart.title, axis, chart.lines, ylabel=chart.ylabel, chance=chance)
            figures.append(image(name, chart.title))
        fixed = series.constants(found)
        parts = ['<div class="grid">' + "".join(figures) + "</div>"] if figures else []
        if fixed:
            parts.append(f"<p>Unchanged over the run, one row each instead of a flat {axis} curve:</p>"
                         + table(sorted(fixed.items()), ("metric", "value")))
        return "".join(parts)  # empty (left out) when every metric was recorded once: see the final values


class ConfigSection(ReportSection):
    """The resolved scenario, as run."""

    title = "Scenario"

    def render(self, data: RunData, out_dir: Path) -> str:
        text = yaml.safe_dump(data.config, sort_keys=False)
        versions = json.dumps((data.summary or {}).get("versions", {}), indent=1)
        return f"<pre>{html.escape(text)}</pre><p>Versions: <code>{html.escape(versions)}</code></p>"

