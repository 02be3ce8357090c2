"""Report sections of the VSDM workload: samples against data, ODE paths, and the covariance check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection


def scatter_panels(path: Path, panels: dict[str, np.ndarray], limits: np.ndarray, alt: str) -> str:
    """Side-by-side scatter plots of 2-D point clouds on common axes, saved as ``path``; its <img>."""
    fig, axes = pyplot().subplots(1, len(panels), figsize=(4.0 * len(panels), 3.8), dpi=100)
    for ax, (title, points) in zip(np.atleast_1d(axes), panels.items()):
        ax.scatter(points[:, 0], points[:, 1], s=2, alpha=0.5)
        ax.set(title=title, xlim=limits[0], ylim=limits[1])
    return figure_image(fig, path, alt)


class SamplesSection(ArraySection):
    """Held-out data next to backward-SDE and probability-flow-ODE samples."""

    title = "Samples (held-out data, backward SDE, probability-flow ODE)"
    requires = ("data", "samples_sde", "samples_ode", "a_matrix")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        reference = arrays["data"]
        pad = 0.15 * (reference.max(0) - reference.min(0))
        limits = np.stack([reference.min(0) - pad, reference.max(0) + pad], axis=1)
        panels = {"data": reference, "SDE samples": arrays["samples_sde"], "ODE samples": arrays["samples_ode"]}
        a = np.array2string(arrays["a_matrix"], precision=3)
        figure = scatter_panels(out_dir / "vsdm-samples.png", panels, limits, "samples")
        return figure + f"<p>Learned variational score matrix A = <code>{a}</code></p>"


class PathsSection(ArraySection):
    """Probability-flow ODE trajectories from the prior (t = 1) to the data (t = 0)."""

    title = "Probability-flow ODE paths"
    requires = ("ode_paths",)

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        paths = arrays["ode_paths"]
        fig, ax = pyplot().subplots(figsize=(5.5, 4.5), dpi=100)
        ax.plot(paths[:, :, 0], paths[:, :, 1], lw=0.6, alpha=0.7)
        ax.scatter(paths[0, :, 0], paths[0, :, 1], s=8, c="k", label="prior draw")
        ax.scatter(paths[-1, :, 0], paths[-1, :, 1], s=8, c="r", label="sample")
        ax.legend(fontsize=8)
        return figure_image(fig, out_dir / "vsdm-paths.png", "ODE paths")


class CovarianceSection(ArraySection):
    """The closed-form marginal covariance against the covariance of simulated forward paths."""

    title = "Closed-form forward covariance vs simulation"
    requires = ("cov_times", "cov_closed", "cov_simulated")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=100)
        for (i, j), name in {(0, 0): "xx", (0, 1): "xy", (1, 1): "yy"}.items():
            line, = ax.plot(arrays["cov_times"], arrays["cov_closed"][:, i, j], label=f"closed form {name}")
            ax.plot(arrays["cov_times"], arrays["cov_simulated"][:, i, j], "o", ms=3, color=line.get_color(),
                    label=f"simulated {name}")
        ax.set(xlabel="t", yscale="symlog", title="Cov(x_t): M_t C_0 M_t^T + Sigma_t")
        ax.legend(fontsize=7, ncol=2)
        figure = figure_image(fig, out_dir / "vsdm-covariance.png", "covariance")
        error = np.abs(arrays["cov_closed"] - arrays["cov_simulated"]).max() / np.abs(arrays["cov_closed"]).max()
        return figure + f"<p>Largest relative gap: {error:.3%}</p>"


SECTIONS: list[ReportSection] = [SamplesSection(), PathsSection(), CovarianceSection()]
