"""Matplotlib figures for reports, rendered headless (Agg) to PNG files.

matplotlib is imported on the first figure, not with this module: a workload's module imports its
report sections (and so this module) wherever the workload runs, and a process that draws nothing
(a Flower client actor, a sweep variant without its report) would pay pyplot's 0.6 s import for
nothing. The report modules that draw their own figures call `pyplot()` likewise.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


@cache
def pyplot() -> ModuleType:
    """matplotlib's pyplot on the headless Agg backend (imported once, on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    pyplot().close(fig)
    return image(path.name, alt or path.stem)


def safe_name(text: str) -> str:
    """A file-name-safe version of a metric name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


def plot_curve(path: Path, title: str, xlabel: str,
               lines: Mapping[str, tuple[Sequence[float], Sequence[float]]], ylabel: str = "",
               distinct: bool = False, chance: float | None = None) -> Path:
    """One line plot with a legend (two lines or more); returns the PNG's path. ``distinct``: a
    colour of its own for every line, past the ten of matplotlib's default cycle. ``chance``: a
    dashed grey line at a classifier's chance accuracy (1 / classes), labelled."""
    fig, ax = pyplot().subplots(figsize=(5.5, 3.4), dpi=110)
    colours = distinct_colours(len(lines)) if distinct else [None] * len(lines)
    for (label, (xs, ys)), colour in zip(lines.items(), colours):
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label, color=colour)
    if chance is not None:
        ax.axhline(chance, color="0.55", linestyle="--", linewidth=1, label=f"chance ({chance:.3g})")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel or title)
    ax.xaxis.set_major_locator(pyplot().MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if len(lines) > 1 or chance is not None:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    pyplot().close(fig)
    return path


def distinct_colours(count: int) -> list:
    """``count`` colours told apart: tab10's, tab20's up to 20, then evenly spaced along turbo."""
    import matplotlib

    if count <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(count)]
    if count <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(count)]
    return [matplotlib.colormaps["turbo"](i / (count - 1)) for i in range(count)]


def plot_heatmap(path: Path, matrix, ylabel: str, xlabel: str, title: str = "", annotate: bool = True,
                 value_label: str = "", cells: str = "cells") -> Path:
    """A matrix as a heatmap (confusion matrices, pairwise privacy losses); NaN cells stay blank.

    The colours span the finite values' own range. When those lie within 1% of the largest, the
    title says so (``all <cells> within [a, b]``): a map stretched over a sliver of range would
    otherwise read as large differences, and a constant one as nothing at all. Positive values
    spanning more than two orders of magnitude get a log scale. Numbers are written into the
    cells of a matrix of at most 12 x 12 (larger ones would not be legible), black on light
    colours and white on dark ones. ``value_label`` labels the colour bar (what and its unit).
    """
    import matplotlib

    matrix = np.asarray(matrix, dtype=np.float64)
    finite = matrix[np.isfinite(matrix)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    narrow = finite.size > 0 and (high == low or high - low < 0.01 * abs(high))
    if low > 0 and high > 100 * low:
        norm: matplotlib.colors.Normalize = matplotlib.colors.LogNorm(low, high)
    elif high == low:  # a constant matrix: centre its one colour on the scale
        pad = max(abs(low) * 0.01, 1e-12)
        norm = matplotlib.colors.Normalize(low - pad, high + pad)
    else:
        norm = matplotlib.colors.Normalize(low, high)
    cmap = matplotlib.colormaps["viridis"]
    fig, ax = pyplot().subplots(figsize=(5.0, 4.2), dpi=110)
    shown = ax.imshow(matrix, cmap=cmap, norm=norm)
    fig.colorbar(shown, ax=ax, label=value_label)
    if annotate and max(matrix.shape) <= 12:
        digits = ".4g" if narrow else ".3g"  # a narrow range differs only in the later digits
        size = 9 if max(matrix.shape) <= 10 else 7  # as large as the cells allow
        for (row, col), value in np.ndenumerate(matrix):
            if np.isfinite(value):
                ax.text(col, row, format(value, digits), ha="center", va="center", fontsize=size,
                        color=_text_colour(cmap(norm(value))))
    if narrow:
        note = f"all {cells} within [{low:.4g}, {high:.4g}]"
        title = f"{title}\n({note})" if title else note
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    for axis in (ax.xaxis, ax.yaxis):  # rows and columns are indices: no ticks between cells
        axis.set_major_locator(pyplot().MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path)
    pyplot().close(fig)
    return path


def _text_colour(rgba) -> str:
    """Black on a light cell, white on a dark one: whichever contrasts more with the cell's relative
    luminance (WCAG 2: linearised sRGB, the two contrasts cross at about 0.179)."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "black" if luminance > 0.179 else "white"
