"""Report sections of the ATraDiff workload: return against environment steps, imagined trajectories,
and how well imagined transitions obey the environment's dynamics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection

MISSING = "<p>Nothing was saved for this section (the run has not finished, or the variant has no generator).</p>"


class ReturnCurveSection(ReportSection):
    """Test return of the deterministic policy and training-episode returns against environment steps."""

    title = "Return against environment steps"

    def render(self, data: RunData, out_dir: Path) -> str:
        evals = [r for r in data.metrics if "test_return" in r]
        if not evals:
            return MISSING
        workload = data.config.get("workload", {})
        fig, ax = pyplot().subplots(figsize=(6, 3.6), dpi=100)
        ax.plot([r["step"] for r in evals], [r["test_return"] for r in evals], marker="o", markersize=3,
                label="test return (mean action)")
        if "episode_returns" in data.artifacts and len(data.artifacts["episode_returns"]):
            ax.scatter(data.artifacts["episode_ends"], data.artifacts["episode_returns"], s=8, alpha=0.5,
                       color="gray", label="training episodes")
        ax.axhline(workload.get("return_threshold", 80.0), color="red", linestyle="--", linewidth=1, label="threshold")
        ax.set(xlabel="environment steps", ylabel="return", title=workload.get("variant", "atradiff"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        solved = evals[-1].get("test_solved", 0) > 0
        note = (f"<p>Threshold reached after {evals[-1]['test_steps_to_threshold']:.0f} environment steps.</p>"
                if solved else "<p>The threshold was not reached in this run.</p>")
        return figure_image(fig, out_dir / "atradiff-return.png") + note


class ImaginedPathsSection(ArraySection):
    """Imagined trajectories (pruned) next to offline scripted ones, in the (position, velocity) plane."""

    title = "Imagined trajectories in phase space"
    requires = ("imagined_paths", "offline_paths")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        fig, axes = pyplot().subplots(1, 2, figsize=(10, 3.8), dpi=100, sharex=True, sharey=True)
        for ax, key, title in ((axes[0], "offline_paths", "offline (scripted policy)"),
                               (axes[1], "imagined_paths", "imagined from fixed starts")):
            for path in arrays[key]:
                ax.plot(path[:, 0], path[:, 1], linewidth=0.8, alpha=0.8)
            ax.axvline(0.45, color="red", linestyle="--", linewidth=1)
            ax.set(title=title, xlabel="position", ylabel="velocity")
            ax.grid(alpha=0.3)
        return figure_image(fig, out_dir / "atradiff-paths.png")


class DynamicsSection(ArraySection):
    """Distribution of the one-step dynamics error of imagined transitions, against the real steps the environment
    takes from the same states and actions."""

    title = "Dynamics consistency of imagined transitions"
    requires = ("step_errors", "step_changes")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        errors, changes = arrays["step_errors"], arrays["step_changes"]
        fig, ax = pyplot().subplots(figsize=(6, 3.4), dpi=100)
        top = max(np.percentile(changes, 99), np.percentile(errors, 99), 1e-6)
        bins = np.linspace(0, top, 40)
        ax.hist(changes, bins=bins, alpha=0.5, label="|f(s, a) - s| (real step)")
        ax.hist(errors, bins=bins, alpha=0.6, label="|s' - f(s, a)| (dynamics error)")
        ax.set(xlabel="scaled state distance", ylabel="transitions")
        ax.legend(fontsize=8)
        ratio = errors.mean() / max(changes.mean(), 1e-12)
        note = (f"<p>Mean error / mean real step: {ratio:.3f} (in real steps) over {len(errors)} imagined "
                "transitions.</p>")
        return figure_image(fig, out_dir / "atradiff-dynamics.png") + note


SECTIONS: list[ReportSection] = [ReturnCurveSection(), DynamicsSection(), ImaginedPathsSection()]
