"""Report sections of the DDDM workload: quality against function evaluations, samples, the estimate buffer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table


def _workload(data: RunData) -> dict:
    return data.config.get("workload", {})


def _digit_rows(ax, rows: np.ndarray) -> None:
    """Draw rows of 8x8 digits ``[rows, count, 64]`` as one image."""
    count, per_row = rows.shape[:2]
    tiles = np.clip(rows, -1, 1).reshape(count, per_row, 8, 8)
    ax.imshow(tiles.transpose(0, 2, 1, 3).reshape(count * 8, per_row * 8), cmap="gray_r")
    ax.set(xticks=[], yticks=[])


class QualitySection(ArraySection):
    """Sample-to-data distance against the number of function evaluations."""

    title = "Sample quality against function evaluations"
    requires = ("steps", "distance")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        workload = _workload(data)
        digits = workload.get("dataset") == "digits"
        label = "FID-like distance (digit features)" if digits else "MMD^2 to held-out data"
        fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=100)
        ax.plot(arrays["steps"], arrays["distance"], marker="o", label=workload.get("variant", "dddm"))
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(arrays["steps"], [str(s) for s in arrays["steps"]])
        ax.set(xlabel="function evaluations (sampler steps)", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        rows = [(int(s), float(d)) for s, d in zip(arrays["steps"], arrays["distance"])]
        return figure_image(fig, out_dir / "dddm-quality.png") + table(rows, ("steps", label))


class SamplesSection(ArraySection):
    """Samples after each number of steps, next to held-out data."""

    title = "Samples by number of steps"
    requires = ("steps", "data", "samples")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        steps, samples = arrays["steps"], arrays["samples"]
        if _workload(data).get("dataset") == "digits":
            fig, ax = pyplot().subplots(figsize=(10, 0.9 * (len(steps) + 1)), dpi=100)
            _digit_rows(ax, np.concatenate([arrays["data"][None], samples])[:, :16])
            ax.set_yticks(4 + 8 * np.arange(len(steps) + 1), ["data"] + [f"{s} steps" for s in steps])
            return figure_image(fig, out_dir / "dddm-samples.png")
        fig, axes = pyplot().subplots(1, len(steps) + 1, figsize=(2.6 * (len(steps) + 1), 2.8), dpi=100)
        for ax, title, points in zip(axes, ["data"] + [f"{s} steps" for s in steps], [arrays["data"], *samples]):
            ax.scatter(points[:, 0], points[:, 1], s=1, alpha=0.4)
            ax.set(title=title, xlim=(-3, 3), ylim=(-3, 3), xticks=[], yticks=[], aspect="equal")
        return figure_image(fig, out_dir / "dddm-samples.png")


class BufferSection(ArraySection):
    """What the per-sample estimate buffer holds at the end of training (DDDM only)."""

    title = "Per-sample estimate buffer at the end of training"
    requires = ("samples",)  # a finished run: the baseline's has no buffer to show

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        if "estimates" not in arrays:
            return "<p>The baseline keeps no estimate buffer.</p>"
        if _workload(data).get("dataset") == "digits":
            fig, ax = pyplot().subplots(figsize=(10, 1.2), dpi=100)
            _digit_rows(ax, arrays["estimates"][None, :16])
            return figure_image(fig, out_dir / "dddm-buffer.png")
        fig, ax = pyplot().subplots(figsize=(4, 4), dpi=100)
        ax.scatter(arrays["estimates"][:, 0], arrays["estimates"][:, 1], s=1, alpha=0.5)
        ax.set(xlim=(-3, 3), ylim=(-3, 3), aspect="equal", title="buffer estimates")
        return figure_image(fig, out_dir / "dddm-buffer.png")


SECTIONS: list[ReportSection] = [QualitySection(), SamplesSection(), BufferSection()]
