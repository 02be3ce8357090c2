"""Report sections of OODRobustBench: the ID-vs-OOD scatter with its trend, the per-shift table, and
the out-of-distribution part of a federated run's robustness audit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

GROUP_COLOURS = {"standard": "tab:gray", "augmented": "tab:green", "adversarial": "tab:blue",
                 "adversarial + augmented": "tab:purple"}


def _scatter_panel(ax: Axes, id_robust: np.ndarray, ood: np.ndarray, groups: np.ndarray, fit: np.ndarray,
                   ylabel: str) -> None:
    for group in sorted(set(groups.tolist())):
        members = groups == group
        ax.scatter(id_robust[members], ood[members], s=22, label=group, color=GROUP_COLOURS.get(group))
    line = np.linspace(0, 1, 2)
    ax.plot(line, line, "k--", lw=0.8, label="y = x (no loss)")
    ax.plot(line, fit[0] * line + fit[1], color="tab:red", lw=1.4,
            label=f"fit: {fit[0]:.2f} x {fit[1]:+.2f}, R² {fit[2]:.2f}")
    ax.set(xlabel="ID robust accuracy (seen threat)", ylabel=ylabel, xlim=(0, 1), ylim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def plot_scatter(path: Path, arrays: dict[str, np.ndarray], alt: str) -> str:
    """OOD_d and OOD_t robustness against ID robustness, one point per model, with the linear trends,
    saved as ``path``; its <img>."""
    fig, axes = pyplot().subplots(1, 2, figsize=(10.5, 4.4), dpi=110)
    _scatter_panel(axes[0], arrays["id_robust"], arrays["ood_d_robust"], arrays["groups"], arrays["fit_d"],
                   "OOD_d robust accuracy (dataset shifts)")
    _scatter_panel(axes[1], arrays["id_robust"], arrays["ood_t_robust"], arrays["groups"], arrays["fit_t"],
                   "OOD_t robust accuracy (threat shifts)")
    return figure_image(fig, path, alt)


class OodScatterSection(ArraySection):
    """The paper's central figure: OOD robustness against ID robustness over the population
    (not part of an ``id_only`` run)."""

    title = "OOD vs ID robustness (one point per model)"
    requires = ("id_robust", "ood_d_robust", "ood_t_robust", "groups", "fit_d", "fit_t")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        figure = plot_scatter(out_dir / "ood-vs-id.png", arrays, "OOD vs ID robust accuracy")
        below = float(np.mean(arrays["ood_d_robust"] < arrays["id_robust"]))
        note = (f"<p>Dashed: no loss out of distribution. OOD_d is below ID for {below:.0%} of the models; "
                f"effective robustness is a model's vertical distance to the red trend.</p>")
        return figure + note


class ShiftTableSection(ArraySection):
    """Per shift: mean robust accuracy and the linear fit over the population; effective robustness per family."""

    title = "Per-shift trends and effective robustness"
    requires = ("shift_names", "shift_kinds", "shift_robust", "shift_fit", "groups", "id_robust", "ood_d_robust",
                "effective_robustness_d")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        rows = [(str(name), str(kind), float(arrays["shift_robust"][:, i].mean()), *map(float, arrays["shift_fit"][i]))
                for i, (name, kind) in enumerate(zip(arrays["shift_names"], arrays["shift_kinds"]))]
        shifts = table(rows, ("shift", "kind", "mean robust acc", "slope", "intercept", "R²"))
        groups = arrays["groups"]
        family_rows = [(group, int((groups == group).sum()), float(arrays["id_robust"][groups == group].mean()),
                        float(arrays["ood_d_robust"][groups == group].mean()),
                        float(arrays["effective_robustness_d"][groups == group].mean()))
                       for group in sorted(set(groups.tolist()))]
        families = table(family_rows, ("training family", "models", "ID robust", "OOD_d robust",
                                       "effective robustness (OOD_d)"))
        return shifts + families


def plot_shift_bars(path: Path, names: list[str], clean: list[float], robust: list[float], alt: str) -> str:
    """Clean and robust accuracy of one model per shift, as grouped bars, saved as ``path``; its <img>."""
    fig, ax = pyplot().subplots(figsize=(10.0, 3.6), dpi=110)
    positions = np.arange(len(names))
    ax.bar(positions - 0.2, clean, 0.4, label="clean", color="tab:gray")
    ax.bar(positions + 0.2, robust, 0.4, label="robust", color="tab:blue")
    ax.set_xticks(positions, names, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="accuracy", ylim=(0, 1))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return figure_image(fig, path, alt)


class OodAuditSection(ReportSection):
    """A federated run's final global model in and out of distribution (``report.ood``)."""

    title = "Out-of-distribution robustness (final global model)"

    def render(self, data: RunData, out_dir: Path) -> str:
        metrics = (data.summary or {}).get("final_metrics", {})
        if "ood_id_robust" not in metrics:
            return ""  # not asked for (report.ood unset): no section
        rows = [(label, metrics[key]) for key, label in (
            ("ood_clean_accuracy", "ID clean accuracy"), ("ood_id_robust", "ID robust accuracy (seen threat)"),
            ("ood_d_clean", "OOD_d clean accuracy (mean over dataset shifts)"),
            ("ood_d_robust", "OOD_d robust accuracy (mean over dataset shifts)"),
            ("ood_t_robust", "OOD_t robust accuracy (mean over threat shifts)"),
            ("ood_d_retention", "OOD_d / ID robustness")) if key in metrics]
        names = [str(n) for n in data.artifacts.get("ood_shift_names", [])]
        figure = ""
        if names:
            # The ID pair first, as the reference every shift is compared with.
            figure = plot_shift_bars(out_dir / "ood-shifts.png", ["ID"] + names,
                                     [metrics["ood_clean_accuracy"], *data.artifacts["ood_shift_clean"]],
                                     [metrics["ood_id_robust"], *data.artifacts["ood_shift_robust"]],
                                     "accuracy per shift")
        return table(rows, ("measure", "value")) + figure
