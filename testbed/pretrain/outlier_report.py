"""Report sections of a ``pretrain.outliers`` run: outlier metrics, FP vs W8A8 quality, activation histograms.

The numbers come from metrics.jsonl (`testbed.pretrain.outlier_eval`); the histograms from the
report arrays the training processes send after the last step. A sweep over attention variants
compares runs in the sweep report (avg_kurtosis, max_inf_norm, heldout_ppl / test_accuracy and
their ``w8a8_`` counterparts, mean over seeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.report.plots import figure_image, plot_curve, plt
from testbed.report.sections import ArraySection, ReportSection, image, table

if TYPE_CHECKING:
    from testbed.report.render import RunData

# A run that did not ask for outliers (pretrain.outliers unset) gets no outlier sections at all.
NOT_MEASURED = ""


def _quality_keys(record: dict) -> tuple[str, str]:
    return ("test_accuracy", "w8a8_test_accuracy") if "test_accuracy" in record else ("heldout_ppl", "w8a8_heldout_ppl")


class OutlierSummarySection(ReportSection):
    """The run's attention variant with its average kurtosis, max infinity norm and FP / W8A8 quality."""

    title = "Outliers and W8A8 quantization"

    def render(self, data: RunData, out_dir: Path) -> str:
        records = [r for r in data.metrics if "avg_kurtosis" in r]
        if not records:
            return NOT_MEASURED
        last, model = records[-1], (data.config.get("pretrain") or {}).get("model") or {}
        fp_key, quant_key = _quality_keys(last)
        header = ("family", "attention", "avg kurtosis", "max inf norm", f"FP {fp_key}", f"W8A8 {fp_key}", "gap")
        row = (model.get("family", "causal_lm"), model.get("attention", "softmax"), last["avg_kurtosis"],
               last["max_inf_norm"], last.get(fp_key, "-"), last.get(quant_key, "-"), last.get("quantization_gap", "-"))
        steps = [r["step"] for r in records]
        plot_curve(out_dir / "outlier-kurtosis.png", "average kurtosis (held-out)", "step",
                   {"avg_kurtosis": (steps, [r["avg_kurtosis"] for r in records])}, ylabel="kurtosis")
        plot_curve(out_dir / "outlier-inf-norm.png", "maximum infinity norm (held-out)", "step",
                   {"max_inf_norm": (steps, [r["max_inf_norm"] for r in records])}, ylabel="max |activation|")
        per_module = last.get("outliers") or {}
        module_rows = [(name, stats["kurtosis"], stats["inf_norm"]) for name, stats in per_module.items()]
        return (table([row], header)
                + "<p>Kurtosis: per sample over all positions x units, mean over samples, then mean over the "
                  "hooked modules; infinity norm: mean over samples of max |x|, then max over modules "
                  "(Hu et al. 2024). gap: W8A8 perplexity minus FP perplexity (language models) or FP minus "
                  "W8A8 accuracy (ViT).</p>"
                + '<div class="grid">' + image("outlier-kurtosis.png", "average kurtosis")
                + image("outlier-inf-norm.png", "max inf norm") + "</div>"
                + "<h3>Per layer, final step</h3>" + table(module_rows, ("module", "kurtosis", "inf norm")))


class ActivationHistogramSection(ArraySection):
    """|activation| histograms of every hooked module after training, log-log, with the peak marked."""

    title = "Activation histograms per layer"
    requires = ("outlier_histograms",)
    missing = NOT_MEASURED

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        names = [str(n) for n in arrays["outlier_modules"]]
        edges, counts, peaks = arrays["outlier_histogram_edges"], arrays["outlier_histograms"], arrays["outlier_peaks"]
        layers = sorted({n.split(".")[0] for n in names if n.startswith("layer")}) + ["final_norm"]
        fig, axes = plt.subplots(1, len(layers), figsize=(3.6 * len(layers), 3.2), dpi=100, squeeze=False)
        centers = np.sqrt(edges[:-1] * edges[1:])
        for ax, layer in zip(axes[0], layers):
            for name, row, peak in zip(names, counts, peaks):
                if name.split(".")[0] == layer:
                    line, = ax.step(centers, np.maximum(row, 0.5), where="mid", label=name.split(".")[-1])
                    ax.axvline(peak, color=line.get_color(), linestyle=":", linewidth=1)
            ax.set(xscale="log", yscale="log", title=layer, xlabel="|activation|", ylabel="count")
            ax.set_ylim(bottom=0.8)  # empty bins are drawn at 0.5, below the axis
            ax.legend(fontsize=7)
        histograms = figure_image(fig, out_dir / "activation-histograms.png", "activation histograms")
        rows = [(name, float(peak)) for name, peak in zip(names, peaks)]
        return (histograms
                + "<p>Held-out activations after the last step; dotted lines: the largest |activation| of each "
                  "module. Outliers are the isolated counts far to the right of the bulk.</p>"
                + table(rows, ("module", "max |activation|")))


OUTLIER_SECTIONS = (OutlierSummarySection(), ActivationHistogramSection())
