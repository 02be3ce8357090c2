"""Report sections of the PPAE workload: source and edited spectrograms, and the attention localisation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection
from testbed.workloads.ppae.data import EVENTS

WORDS = ("background", *EVENTS, "-")


def _caption(tokens: np.ndarray) -> str:
    return " + ".join(WORDS[int(t)] for t in tokens[1:] if WORDS[int(t)] != "-")


def _span(ax, frames: np.ndarray, colour: str, label: str, y: float) -> None:
    """Mark the frames where ``frames`` is 1 with a bar at height ``y``."""
    idx = np.flatnonzero(frames)
    ax.plot(idx, np.full(len(idx), y), "s", color=colour, markersize=3, label=label)


class EditSection(ArraySection):
    """Source and edited spectrograms with the true event (green) and the blend's mask (cyan: the attention mask,
    or the true frames with ``mask: oracle``)."""

    title = "Edits: source and result, true event and attention mask"
    requires = ("source", "edited", "truth", "mask", "source_caption", "target_caption")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        workload = data.config.get("workload", {})
        variant = workload.get("variant", "ppae")
        if workload.get("blend") is False:
            variant += " (no blend)"
        elif workload.get("mask") == "oracle":
            variant += " (oracle mask)"
        count = len(arrays["source"])
        fig, axes = pyplot().subplots(2, count, figsize=(2.8 * count, 5.4), dpi=100, squeeze=False)
        for j in range(count):
            for row, (key, title) in enumerate((("source", _caption(arrays["source_caption"][j])),
                                                ("edited", f"{variant}: {_caption(arrays['target_caption'][j])}"))):
                ax = axes[row, j]
                ax.imshow(arrays[key][j].T, origin="lower", aspect="auto", cmap="magma", vmin=-1, vmax=4)
                _span(ax, arrays["truth"][j], "lime", "true event", 30)
                _span(ax, arrays["mask"][j], "cyan", "attention mask", 28)
                ax.set_title(title, fontsize=8)
                ax.set(xticks=[], yticks=[])
        axes[0, 0].legend(fontsize=6, loc="lower right")
        return figure_image(fig, out_dir / "ppae-edits.png")


class AttentionSection(ArraySection):
    """The edited word's cross-attention over time (averaged over steps, layers, heads) against the true event."""

    title = "Cross-attention of the edited word over time"
    requires = ("attention", "truth", "iou")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        count = len(arrays["attention"])
        fig, axes = pyplot().subplots(1, count, figsize=(2.8 * count, 2.6), dpi=100, squeeze=False)
        for j, ax in enumerate(axes[0]):
            frames = np.arange(len(arrays["attention"][j]))
            ax.fill_between(frames, 0, arrays["truth"][j], step="mid", color="lime", alpha=0.3, label="true event")
            ax.plot(frames, arrays["attention"][j], "k-", label="attention / max")
            ax.axhline(data.config.get("workload", {}).get("threshold", 0.5), color="cyan", lw=1, ls="--")
            ax.set(ylim=(0, 1.05), xlabel="frame", title=f"IoU {arrays['iou'][j]:.2f}")
        axes[0, 0].legend(fontsize=6)
        return figure_image(fig, out_dir / "ppae-attention.png")


SECTIONS: list[ReportSection] = [EditSection(), AttentionSection()]
