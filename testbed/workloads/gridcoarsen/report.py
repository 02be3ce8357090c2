"""Report sections of ``gridcoarsen``: error against reduction factor, the grids, and the sensor curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, plot_curve, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, image, table


class ReductionSection(ArraySection):
    """Sensor-curve error against the reduction factor, optimised vs k-means vs random (the paper's plot)."""

    title = "Sensor-curve error against reduction factor"
    requires = ("reduction_errors", "reductions", "kinds", "equations", "variant")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        reductions = arrays["reductions"].tolist()
        kinds = [str(k) for k in arrays["kinds"]]
        html, rows = "", []
        for e, equation in enumerate(str(q) for q in arrays["equations"]):
            errors = arrays["reduction_errors"][e]
            lines = {kind: (reductions, errors[k].tolist()) for k, kind in enumerate(kinds)}
            path = plot_curve(out_dir / f"gridcoarsen-reduction-{equation}.png",
                              f"{equation}: sensor RMSE vs reduction", "reduction factor N_fine / N", lines,
                              ylabel="sensor RMSE")
            html += image(path.name, f"{equation} error against reduction")
            rows += [(equation, r, *(float(errors[k][i]) for k in range(len(kinds))),
                      float(errors[0][i] / errors[1][i])) for i, r in enumerate(reductions)]
        note = (f"<p>Run variant: <b>{arrays['variant']}</b>. 'optimised' is the grid after this run's training "
                "steps (equal to k-means when the variant is a baseline).</p>")
        return note + html + table(rows, ("equation", "reduction", *kinds, "optimised / kmeans"))


class GridSection(ArraySection):
    """Fine points over the permeability field; k-means and optimised coarse points at the largest reduction."""

    title = "Grids at the largest reduction"
    requires = ("fine_points", "fine_permeability", "num_fixed", "equations")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        equations = [str(q) for q in arrays["equations"]]
        fine, fixed = arrays["fine_points"], int(arrays["num_fixed"])
        fig, axes = pyplot().subplots(1, len(equations), figsize=(5.2 * len(equations), 4.8), dpi=100, squeeze=False)
        for ax, equation in zip(axes[0], equations):
            shade = ax.tricontourf(fine[:, 0], fine[:, 1], np.log(arrays["fine_permeability"]), levels=20,
                                   cmap="Greys", alpha=0.6)
            ax.scatter(fine[:-fixed, 0], fine[:-fixed, 1], s=3, c="0.4", label="fine points")
            kmeans, optimised = arrays[f"points_kmeans_{equation}"], arrays[f"points_optimised_{equation}"]
            ax.scatter(kmeans[:-fixed, 0], kmeans[:-fixed, 1], s=18, facecolors="none", edgecolors="tab:blue",
                       label="k-means")
            ax.scatter(optimised[:-fixed, 0], optimised[:-fixed, 1], s=14, c="tab:orange", label="optimised")
            ax.plot(*fine[-fixed], "r*", markersize=12, label="source")
            ax.plot(fine[-fixed + 1:, 0], fine[-fixed + 1:, 1], "g^", markersize=8, label="sensors")
            ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", title=f"{equation}: {len(kmeans)} coarse points")
            ax.legend(fontsize=7, loc="lower right")
        fig.colorbar(shade, ax=axes[0].tolist(), label="log permeability", shrink=0.8)
        path = out_dir / "gridcoarsen-grids.png"
        fig.savefig(path)
        pyplot().close(fig)
        return image(path.name, "fine and coarse grids")


class CurvesSection(ArraySection):
    """Sensor curves of the fine grid and of each coarse grid at the largest reduction."""

    title = "Sensor curves at the largest reduction"
    requires = ("fine_points", "equations", "kinds")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        equations = [str(q) for q in arrays["equations"]]
        labels = ["fine", *(str(k) for k in arrays["kinds"])]
        sensors = arrays[f"curves_{equations[0]}"].shape[2]
        fig, axes = pyplot().subplots(len(equations), sensors, figsize=(3.6 * sensors, 2.8 * len(equations)), dpi=100,
                                 squeeze=False)
        for row, equation in zip(axes, equations):
            curves, times = arrays[f"curves_{equation}"], arrays[f"times_{equation}"]
            for s, ax in enumerate(row):
                for curve, label in zip(curves, labels):
                    ax.plot(times, curve[:, s], label=label, lw=2.2 if label == "fine" else 1.2,
                            color="k" if label == "fine" else None)
                ax.set(title=f"{equation}, sensor {s + 1}", xlabel="time")
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        return figure_image(fig, out_dir / "gridcoarsen-curves.png", "sensor curves")
