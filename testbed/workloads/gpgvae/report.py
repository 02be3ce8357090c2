"""Report sections of the GPGVAE workload: edge-recovery ROC per interaction type, AUC over training,
and one substitute graph as the truth, the prior and the posterior see it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_curve

from testbed.report.plots import figure_image, numeric_series, plot_curve, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, image, table


def _pairs(matrices: np.ndarray) -> np.ndarray:
    upper = np.triu_indices(matrices.shape[-1], 1)
    return np.concatenate([m[upper] for m in matrices])


class RocSection(ArraySection):
    """Pooled ROC curves of the recovered edges, complements and substitutes side by side."""

    title = "Edge recovery: ROC by interaction type"
    requires = ("probabilities", "prior", "adjacency", "corr", "beta")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        variant = data.config.get("workload", {}).get("variant", "gpgvae")
        fig, axes = pyplot().subplots(1, 2, figsize=(9, 4), dpi=100)
        for ax, (label, mask) in zip(axes, (("complements", arrays["beta"] > 0), ("substitutes", arrays["beta"] < 0))):
            truth = _pairs(arrays["adjacency"][mask])
            scores = {f"VAE posterior ({variant} prior)": arrays["probabilities"][mask],
                      f"{variant} prior alone": arrays["prior"][mask],
                      "ungated prior (1+corr)/2": (1 + arrays["corr"][mask]) / 2,
                      "|corr| threshold graph": np.abs(arrays["corr"][mask])}
            for name, score in scores.items():
                fpr, tpr, _ = roc_curve(truth, _pairs(score))
                ax.plot(fpr, tpr, label=name)
            ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
            ax.set(title=label, xlabel="false positive rate", ylabel="true positive rate", aspect="equal")
            ax.legend(fontsize=7, loc="lower right")
        return figure_image(fig, out_dir / "gpgvae-roc.png", "ROC of recovered edges")


class AucCurveSection(ReportSection):
    """Mean edge AUC per interaction type over training, with the prior and the correlation graph."""

    title = "Edge ROC-AUC during training"

    def render(self, data: RunData, out_dir: Path) -> str:
        series = numeric_series(data.metrics)
        keys = [k for k in ("test_auc_complement", "test_auc_substitute", "test_prior_auc_substitute",
                            "test_corr_auc_substitute") if k in series]
        if not keys:
            return "<p>No evaluation recorded.</p>"
        plot_curve(out_dir / "gpgvae-auc.png", "mean edge ROC-AUC over test graphs", "step",
                   {k.removeprefix("test_"): series[k] for k in keys}, ylabel="edge ROC-AUC")
        last = data.metrics[-1]
        rows = [(k.removeprefix("test_"), last[k]) for k in sorted(last) if k.startswith("test_")]
        return image("gpgvae-auc.png", "AUC over training") + table(rows, ("final metric", "value"))


class GraphSection(ArraySection):
    """One substitute graph: true adjacency, the prior's and the posterior's edge probabilities."""

    title = "A substitute game's graph: truth, prior, posterior"
    requires = ("probabilities", "prior", "adjacency", "beta")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        first = int(np.flatnonzero(arrays["beta"] < 0)[0])
        panels = {"true adjacency": arrays["adjacency"][first], "prior": arrays["prior"][first],
                  "posterior q(A|X)": arrays["probabilities"][first]}
        fig, axes = pyplot().subplots(1, 3, figsize=(10, 3.4), dpi=100)
        for ax, (title, matrix) in zip(axes, panels.items()):
            matrix = matrix.astype(float)
            np.fill_diagonal(matrix, np.nan)  # no self-loops: the diagonal is not a variable
            shown = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=1)
            ax.set(title=title, xticks=[], yticks=[])
        fig.colorbar(shown, ax=axes, shrink=0.8)
        fig.savefig(out_dir / "gpgvae-graph.png")
        pyplot().close(fig)
        return image("gpgvae-graph.png", "substitute graph")


SECTIONS: list[ReportSection] = [RocSection(), AucCurveSection(), GraphSection()]
