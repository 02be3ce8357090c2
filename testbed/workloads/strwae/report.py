"""Report sections of ``strwae``: what the representation reveals, and what the decoder generates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table
from testbed.workloads.strwae.data import LIGHTS

# Final metrics shown in the probe table, with the value a representation without information has.
PROBE_ROWS = (
    ("nuisance_accuracy_lr", "light S from representation, logistic regression (lower is better)", 0.25),
    ("nuisance_accuracy_rf", "light S from representation, random forest (lower is better)", 0.25),
    ("label_accuracy", "digit Y from representation, 100-label logistic regression", 0.10),
    ("classifier_accuracy", "digit Y from the encoder's own classifier (semi-supervised)", 0.10),
    ("gen_digit_accuracy", "generated images: judge reads the requested digit", 0.10),
    ("gen_light_accuracy", "generated images: judge reads the requested light", 0.25),
    ("relight_digit_accuracy", "relit test images: digit kept", 0.10),
    ("relight_light_accuracy", "relit test images: judge reads the new light", 0.25),
)


def plot_mosaic(path: Path, images: np.ndarray, title: str, row_labels: list[str], col_labels: list[str],
                alt: str) -> str:
    """A grid of grey 8x8 images, ``images`` shaped (rows, columns, 8, 8), saved as ``path``; its <img>."""
    rows, cols = images.shape[:2]
    fig, axes = pyplot().subplots(rows, cols, figsize=(0.8 * cols + 1.2, 0.8 * rows + 0.6), dpi=100, squeeze=False)
    for (r, c), ax in np.ndenumerate(axes):
        ax.imshow(images[r, c], cmap="gray", vmin=0, vmax=1)
        ax.set_xticks([]), ax.set_yticks([])
        if c == 0:
            ax.set_ylabel(row_labels[r], fontsize=7)
        if r == 0:
            ax.set_title(col_labels[c], fontsize=7)
    fig.suptitle(title, fontsize=9)
    return figure_image(fig, path, alt)


def plot_embedding(path: Path, points: np.ndarray, colours: np.ndarray, title: str, names: list[str],
                   alt: str) -> str:
    """2-D projection of the representation, one colour per category, saved as ``path``; its <img>."""
    fig, ax = pyplot().subplots(figsize=(4.6, 3.8), dpi=110)
    for index, name in enumerate(names):
        chosen = colours == index
        ax.scatter(points[chosen, 0], points[chosen, 1], s=5, alpha=0.6, label=name)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, markerscale=2, ncol=2)
    return figure_image(fig, path, alt)


class RepresentationSection(ReportSection):
    """Probe accuracies against chance, and the representation's first two principal components."""

    title = "What the representation reveals (test images)"

    def render(self, data: RunData, out_dir: Path) -> str:
        last = next((r for r in reversed(data.metrics) if "nuisance_accuracy_lr" in r), None)
        if last is None:
            return "<p>No evaluation was recorded.</p>"
        rows = [(label, round(last[key], 4), chance) for key, label, chance in PROBE_ROWS if key in last]
        html = table(rows, ("metric", "value", "chance"))
        arrays = data.artifacts
        if "embedding" in arrays:
            light = plot_embedding(out_dir / "strwae-by-light.png", arrays["embedding"], arrays["embedding_s"],
                                   "coloured by light S (nuisance)", list(LIGHTS), "by light")
            digit = plot_embedding(out_dir / "strwae-by-digit.png", arrays["embedding"], arrays["embedding_y"],
                                   "coloured by digit Y", [str(d) for d in range(10)], "by digit")
            html += f'<div class="grid">{light}{digit}</div>'
        return html


class GenerationSection(ArraySection):
    """Decoded images: generation from the prior, and test images decoded under every light."""

    title = "Generation and relighting"
    requires = ("generated", "generated_kind", "relit")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        generated = arrays["generated"]
        kind = str(arrays["generated_kind"])
        cols = list(LIGHTS) if kind != "unconditional" else [""] * generated.shape[1]
        rows = [f"y={d}" for d in range(10)] if kind == "digit and light" else [""] * generated.shape[0]
        first = plot_mosaic(out_dir / "strwae-generated.png", generated, f"samples from the prior ({kind})", rows, cols,
                            "generated")
        relit = arrays["relit"]
        conditional = relit.shape[1] > 2
        relit_cols = ["original"] + (list(LIGHTS) if conditional else ["reconstruction"])
        title = "test images decoded under each light" if conditional else "test images and reconstructions"
        second = plot_mosaic(out_dir / "strwae-relit.png", relit, title, [""] * relit.shape[0], relit_cols, "relit")
        return f'<div class="grid">{first}{second}</div>'
