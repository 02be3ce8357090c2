"""Matplotlib figures for reports, rendered headless (Agg) to PNG files."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator


def x_axis(records: list[dict[str, Any]]) -> str:
    """The progress key of the records: ``round`` for federated runs, else ``step``."""
    return "round" if any("round" in r for r in records) else "step"


def numeric_series(records: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """For each numeric metric, its (x, y) points in record order."""
    axis = x_axis(records)
    series: dict[str, tuple[list[float], list[float]]] = {}
    for record in records:
        for key, value in record.items():
            if key == axis or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            xs, ys = series.setdefault(key, ([], []))
            xs.append(record.get(axis, len(xs)))
            ys.append(float(value))
    return series


def image(name: str, alt: str) -> str:
    """The report's <figure> for the PNG ``name`` beside the page."""
    return f'<figure><img src="{html.escape(name)}" alt="{html.escape(alt)}"></figure>'


def figure_image(fig, path: Path, alt: str | None = None) -> str:
    """Lay out, save and close ``fig`` as ``path``; return the report's <img> for it."""
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return image(path.name, alt or path.stem)


def safe_name(text: str) -> str:
    """A file-name-safe version of a metric name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def plot_curve(path: Path, title: str, xlabel: str,
               lines: Mapping[str, tuple[Sequence[float], Sequence[float]]]) -> Path:
    """One line plot with a legend; returns the PNG's path."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=110)
    for label, (xs, ys) in lines.items():
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if len(lines) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_heatmap(path: Path, matrix, ylabel: str, xlabel: str, title: str = "", annotate: bool = True) -> Path:
    """A matrix as an annotated heatmap (confusion matrices, pairwise privacy losses)."""
    fig, ax = plt.subplots(figsize=(5.0, 4.2), dpi=110)
    shown = ax.imshow(matrix, cmap="viridis")
    fig.colorbar(shown, ax=ax)
    if annotate and max(matrix.shape) <= 12:
        for (row, col), value in np.ndenumerate(matrix):
            ax.text(col, row, f"{value:.3g}", ha="center", va="center", color="w", fontsize=7)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
