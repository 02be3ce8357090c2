"""Report sections of the MusicFlow workload: FD against sampler steps, spectrograms, stage-2 adherence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table
from testbed.workloads.musicflow.data import describe


def _spectrogram(ax, features: np.ndarray, title: str) -> None:
    """Frames along x, semitone bands (C4 at the bottom) along y."""
    ax.imshow(features.T, origin="lower", aspect="auto", cmap="magma", vmin=-2, vmax=3)
    ax.set_title(title, fontsize=8)
    ax.set(xticks=[], yticks=[])


class StepsSection(ArraySection):
    """Frechet distance of text-to-music samples against the number of Euler steps (per stage)."""

    title = "Sample quality against sampler steps"
    requires = ("fd", "fd_steps")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        variant = data.config.get("workload", {}).get("variant", "musicflow")
        stages = 1 if variant == "single" else 2
        evaluations = arrays["fd_steps"] * stages
        fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=100)
        ax.plot(evaluations, arrays["fd"], marker="o", label=variant)
        ax.set_xscale("log", base=2)
        ax.set(xlabel="network evaluations (steps x stages)", ylabel="Frechet distance (classifier features)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        rows = [(int(s), int(e), float(f)) for s, e, f in zip(arrays["fd_steps"], evaluations, arrays["fd"])]
        return figure_image(fig, out_dir / "musicflow-steps.png") + table(rows,
                                                                          ("steps per stage", "evaluations", "FD"))


class SpectrogramSection(ArraySection):
    """Held-out clips, text-to-music samples for the same descriptions, and infilled middles."""

    title = "Spectrograms: real, generated, infilled"
    requires = ("real", "generated", "infilled", "infill_mask", "labels")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        count = len(arrays["labels"])
        fig, axes = pyplot().subplots(3, count, figsize=(2.6 * count, 6.2), dpi=100, squeeze=False)
        start, stop = np.flatnonzero(arrays["infill_mask"])[[0, -1]]
        for j in range(count):
            text = describe(int(arrays["labels"][j]))
            _spectrogram(axes[0, j], arrays["real"][j], f"real: {text}")
            _spectrogram(axes[1, j], arrays["generated"][j], "generated from the text")
            _spectrogram(axes[2, j], arrays["infilled"][j], "infilled middle (between lines)")
            for x in (start - 0.5, stop + 0.5):
                axes[2, j].axvline(x, color="cyan", lw=1)
        return figure_image(fig, out_dir / "musicflow-spectrograms.png")


class FollowSection(ArraySection):
    """Stage 2 conditioned on held-out semantic features: pitch class per frame, asked and produced."""

    title = "Stage 2 follows its semantic conditioning"
    requires = ("real",)  # a finished run; only the cascade saves the follow_* arrays

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        if "follow_target" not in arrays:
            return "<p>The single-stage model has no semantic conditioning.</p>"
        count = len(arrays["follow_target"])
        fig, axes = pyplot().subplots(1, count, figsize=(2.6 * count, 2.6), dpi=100, squeeze=False)
        for ax, target, produced in zip(axes[0], arrays["follow_target"], arrays["follow_generated"]):
            ax.step(np.arange(len(target)), target, where="mid", label="conditioning", lw=2, alpha=0.6)
            ax.plot(np.arange(len(produced)), produced, "k.", label="generated")
            ax.set(ylim=(-0.5, 11.5), xlabel="frame", ylabel="pitch class")
        axes[0, 0].legend(fontsize=7)
        return figure_image(fig, out_dir / "musicflow-follow.png")


SECTIONS: list[ReportSection] = [StepsSection(), SpectrogramSection(), FollowSection()]
