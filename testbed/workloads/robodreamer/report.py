"""Report sections of the RoboDreamer workload: success per (colour, direction) pair, and generated videos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Rectangle

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection
from testbed.workloads.robodreamer.world import COLOURS, DIRECTIONS


def _pixels(frame: np.ndarray) -> np.ndarray:
    """A ``[3, G, G]`` frame in [-1, 1] as an RGB image in [0, 1]."""
    return np.clip((frame.transpose(1, 2, 0) + 1) / 2, 0, 1)


def move_name(colour: int, direction: int) -> str:
    return f"{COLOURS[colour]} {DIRECTIONS[direction]}"


class SuccessGridSection(ArraySection):
    """Task success of generated videos for each evaluated combination of two moves; unseen ones outlined."""

    title = "Task success by combination of moves (outlined: combinations never seen in training)"
    requires = ("combo_success", "combo_moves", "combo_unseen")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        moves, success, unseen = arrays["combo_moves"], arrays["combo_success"], arrays["combo_unseen"].astype(bool)
        size = len(COLOURS) * len(DIRECTIONS)
        grid = np.full((size, size), np.nan)
        first, second = moves[:, 0] * len(DIRECTIONS) + moves[:, 1], moves[:, 2] * len(DIRECTIONS) + moves[:, 3]
        grid[first, second] = success
        fig, ax = pyplot().subplots(figsize=(7.5, 6.4), dpi=100)
        shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        fig.colorbar(shown, ax=ax, label="success rate")
        for row, col, hidden in zip(first, second, unseen):
            if hidden:
                ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
        names = [move_name(c, d) for c in range(len(COLOURS)) for d in range(len(DIRECTIONS))]
        ax.set_xticks(range(size), names, rotation=90, fontsize=7)
        ax.set_yticks(range(size), names, fontsize=7)
        ax.set(xlabel="second clause", ylabel="first clause",
               title=data.config.get("workload", {}).get("variant", "compositional"))
        note = (f"<p>Mean success: unseen combinations {success[unseen].mean():.3f}, "
                f"seen combinations {success[~unseen].mean():.3f}.</p>")
        return figure_image(fig, out_dir / "robodreamer-success.png") + note


class VideosSection(ArraySection):
    """One generated video per unseen combination, above the renderer's ground truth."""

    title = "Generated videos for unseen instructions (top: generated, bottom: ground truth)"
    requires = ("example_first", "example_generated", "example_truth", "example_moves")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        first, generated, truth = arrays["example_first"], arrays["example_generated"], arrays["example_truth"]
        count, frames = generated.shape[:2]
        fig, axes = pyplot().subplots(2 * count, frames + 1, figsize=(1.3 * (frames + 1), 1.35 * 2 * count),
                                 dpi=100, squeeze=False)
        for k, (c1, d1, c2, d2) in enumerate(arrays["example_moves"]):
            for row, video in ((2 * k, generated[k]), (2 * k + 1, truth[k])):
                for col, frame in enumerate([first[k], *video]):
                    ax = axes[row, col]
                    ax.imshow(_pixels(frame), interpolation="nearest")
                    ax.set(xticks=[], yticks=[])
            axes[2 * k, 0].set_ylabel(f"{move_name(c1, d1)}\n{move_name(c2, d2)}", fontsize=7)
        return figure_image(fig, out_dir / "robodreamer-videos.png")


SECTIONS: list[ReportSection] = [SuccessGridSection(), VideosSection()]
