"""Report sections of the STC workload: predicted frames next to the truth, error by horizon,
and the delayed-recall outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table


class FramesSection(ArraySection):
    """Test sequences: the input frames, the true future and the network's closed-loop prediction."""

    title = "Predicted frames (test sequences)"
    requires = ("targets", "predictions", "frames_in")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        targets, predictions, frames_in = arrays["targets"], arrays["predictions"], int(arrays["frames_in"])
        count, length = targets.shape[:2]
        fig, axes = pyplot().subplots(2 * count, length, figsize=(length * 0.9, 2 * count * 0.95), dpi=100)
        for row in range(count):
            for t in range(length):
                truth, guess = axes[2 * row, t], axes[2 * row + 1, t]
                truth.imshow(targets[row, t], cmap="gray", vmin=0, vmax=1)
                if t >= frames_in:
                    guess.imshow(np.clip(predictions[row, t - frames_in], 0, 1), cmap="gray", vmin=0, vmax=1)
                for ax in (truth, guess):
                    ax.set(xticks=[], yticks=[])
                    ax.axis("off") if (ax is guess and t < frames_in) else None
            axes[2 * row, 0].set_ylabel("true", fontsize=7)
            axes[2 * row + 1, frames_in].set_ylabel("predicted", fontsize=7)
        for t in range(length):
            axes[0, t].set_title(f"t={t}" + (" (in)" if t < frames_in else ""), fontsize=7)
        variant = data.config.get("workload", {}).get("variant", "stc")
        return f"<p>Neuron: {variant}. Rows alternate truth / prediction.</p>" + figure_image(
            fig, out_dir / "stc-frames.png", "predicted frames")


class HorizonSection(ArraySection):
    """Per-pixel MSE of each future frame: how the closed-loop error grows with the horizon."""

    title = "Prediction error by horizon"
    requires = ("horizon_mse",)

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        mse = arrays["horizon_mse"]
        fig, ax = pyplot().subplots(figsize=(5.5, 3.4), dpi=100)
        ax.plot(np.arange(1, len(mse) + 1), mse, marker="o")
        ax.set_xticks(np.arange(1, len(mse) + 1))
        ax.set(xlabel="frames ahead", ylabel="MSE per pixel", title="closed-loop error by horizon")
        ax.grid(alpha=0.3)
        last = [r for r in data.metrics if "test_mse" in r]
        rows = [(k.removeprefix("test_"), last[-1][k]) for k in ("test_mse", "test_mae", "test_ssim", "test_psnr")
                if last and k in last[-1]]
        return figure_image(fig, out_dir / "stc-horizon.png", "error by horizon") + table(rows, ("metric", "final"))


class RecallSection(ArraySection):
    """Delayed recall: the first frame shown, and the network's output when the cue arrives."""

    title = "Delayed recall"
    requires = ("recall_targets", "recall_outputs")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        targets, outputs = arrays["recall_targets"], arrays["recall_outputs"]
        fig, axes = pyplot().subplots(2, len(targets), figsize=(1.4 * len(targets), 3), dpi=100)
        for i in range(len(targets)):
            axes[0, i].imshow(targets[i], cmap="gray", vmin=0, vmax=1)
            axes[1, i].imshow(np.clip(outputs[i], 0, 1), cmap="gray", vmin=0, vmax=1)
            axes[0, i].axis("off")
            axes[1, i].axis("off")
        axes[0, 0].set_title("shown at t=0", fontsize=8, loc="left")
        axes[1, 0].set_title("output at the cue", fontsize=8, loc="left")
        last = [r for r in data.metrics if "test_mse" in r]
        rows = [(k.removeprefix("test_"), last[-1][k]) for k in ("test_mse", "test_mse_mean_frame", "test_ssim")
                if last and k in last[-1]]
        return figure_image(fig, out_dir / "stc-recall.png", "delayed recall") + table(rows, ("metric", "final"))


SECTIONS: list[ReportSection] = [FramesSection(), HorizonSection(), RecallSection()]
