"""Report sections of the MusicFlow workload: FD against sampler steps, spectrograms, stage-2 adherence."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from testbed.report.plots import figure_image  # noqa: E402
from testbed.report.render import RunData  # noqa: E402
from testbed.report.sections import ReportSection, table  # noqa: E402
from testbed.workloads.musicflow.data import describe  # noqa: E402

MISSING = "<p>No samples were saved (the run has not finished).</p>"


def _spectrogram(ax, features: np.ndarray, title: str) -> None:
    """Frames along x, semitone bands (C4 at the bottom) along y."""
    ax.imshow(features.T, origin="lower", aspect="auto", cmap="magma", vmin=-2, vmax=3)
    ax.set_title(title, fontsize=8)
    ax.set(xticks=[], yticks=[])


class StepsSection(ReportSection):
    """Frechet distance of text-to-music samples against the number of Euler steps (per stage)."""

    title = "Sample quality against sampler steps"

    def render(self, data: RunData, out_dir: Path) -> str:
        arrays = data.artifacts
        if "fd" not in arrays:
            return MISSING
        variant = data.config.get("workload", {}).get("variant", "musicflow")
        stages = 1 if variant == "single" else 2
        evaluations = arrays["fd_steps"] * stages
        fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=100)
        ax.plot(evaluations, arrays["fd"], marker="o", label=variant)
        ax.set_xscale("log", base=2)
        ax.set(xlabel="network evaluations (steps x stages)", ylabel="Frechet distance (classifier features)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        rows = [(int(s), int(e), float(f)) for s, e, f in zip(arrays["fd_steps"], evaluations, arrays["fd"])]
        return figure_image(fig, out_dir / "musicflow-steps.png") + table(rows, ("steps per stage", "evaluations", "FD"))


class SpectrogramSection(ReportSection):
    """Held-out clips, text-to-music samples for the same descriptions, and infilled middles."""

    title = "Spectrograms: real, generated, infilled"

    def render(self, data: RunData, out_dir: Path) -> str:
        arrays = data.artifacts
        if "real" not in arrays:
            return MISSING
        count = len(arrays["labels"])
        fig, axes = plt.subplots(3, count, figsize=(2.6 * count, 6.2), dpi=100, squeeze=False)
        start, stop = np.flatnonzero(arrays["infill_mask"])[[0, -1]]
        for j in range(count):
            text = describe(int(arrays["labels"][j]))
            _spectrogram(axes[0, j], arrays["real"][j], f"real: {text}")
            _spectrogram(axes[1, j], arrays["generated"][j], "generated from the text")
            _spectrogram(axes[2, j], arrays["infilled"][j], "infilled middle (between lines)")
            for x in (start - 0.5, stop + 0.5):
                axes[2, j].axvline(x, color="cyan", lw=1)
        return figure_image(fig, out_dir / "musicflow-spectrograms.png")


class FollowSection(ReportSection):
    """Stage 2 conditioned on held-out semantic features: pitch class per frame, asked and produced."""

    title = "Stage 2 follows its semantic conditioning"

    def render(self, data: RunData, out_dir: Path) -> str:
        arrays = data.artifacts
        if "follow_target" not in arrays:
            return "<p>The single-stage model has no semantic conditioning.</p>" if "real" in arrays else MISSING
        count = len(arrays["follow_target"])
        fig, axes = plt.subplots(1, count, figsize=(2.6 * count, 2.6), dpi=100, squeeze=False)
        for ax, target, produced in zip(axes[0], arrays["follow_target"], arrays["follow_generated"]):
            ax.step(np.arange(len(target)), target, where="mid", label="conditioning", lw=2, alpha=0.6)
            ax.plot(np.arange(len(produced)), produced, "k.", label="generated")
            ax.set(ylim=(-0.5, 11.5), xlabel="frame", ylabel="pitch class")
        axes[0, 0].legend(fontsize=7)
        return figure_image(fig, out_dir / "musicflow-follow.png")


SECTIONS: list[ReportSection] = [StepsSection(), SpectrogramSection(), FollowSection()]
