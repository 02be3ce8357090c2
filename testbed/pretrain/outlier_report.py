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

from testbed.report.plots import figure_image, plot_curve, pyplot
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


def layer_index(name: str) -> int:
    """The j of ``layer{j}``: layers sort by depth, not as text (``layer10`` after ``layer2``)."""
    return int(name.removeprefix("layer"))


# (figure title, metrics.jsonl dict, per-layer key inside it, statistic)
LAYER_CURVES = (("block output kurtosis", "outliers", "output", "kurtosis"),
                ("block output inf norm", "outliers", "output", "inf_norm"),
                ("FFN output kurtosis", "outliers", "ffn_out", "kurtosis"),
                ("FFN output inf norm", "outliers", "ffn_out", "inf_norm"),
                ("attention mass on the first token (sink)", "sink", "", "mass"),
                ("residual norm at the first token", "sink", "", "sink_norm"))


class LayerCurvesSection(ReportSection):
    """Per layer over training: FFN-output and block-output kurtosis and inf norm, the attention
    mass on each document's first token and that token's residual norm (beside the others')."""

    title = "Outliers and the attention sink per layer, over training"

    def render(self, data: RunData, out_dir: Path) -> str:
        records = [r for r in data.metrics if "sink" in r and "outliers" in r]
        if not records:
            return NOT_MEASURED
        steps = [r["step"] for r in records]
        layers = sorted(records[-1]["sink"], key=layer_index)
        fig, axes = pyplot().subplots(2, 3, figsize=(13, 6.4), dpi=100)
        for ax, (title, source, role, stat) in zip(axes.flat, LAYER_CURVES):
            for layer in layers:
                key = f"{layer}.{role}" if role else layer
                line, = ax.plot(steps, [r[source].get(key, {}).get(stat, float("nan")) for r in records], label=layer)
                if stat == "sink_norm":
                    ax.plot(steps, [r[source].get(key, {}).get("other_norm", float("nan")) for r in records],
                            linestyle=":", color=line.get_color(), label=f"{layer} (other tokens)")
            ax.set(title=title, xlabel="step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        curves = figure_image(fig, out_dir / "outlier-layer-curves.png", "per-layer outlier and sink curves")
        last = records[-1]
        rows = [(layer, last["outliers"].get(f"{layer}.ffn_out", {}).get("kurtosis", "-"),
                 last["outliers"].get(f"{layer}.output", {}).get("kurtosis", "-"),
                 last["outliers"].get(f"{layer}.output", {}).get("inf_norm", "-"),
                 last["sink"][layer]["mass"], last["sink"][layer]["sink_norm"], last["sink"][layer]["other_norm"])
                for layer in layers]
        return (curves + "<p>Held-out documents at every evaluation. Sink: the attention weight a query puts on "
                "its document's first token (BOS where the corpus has one), mean over heads and queries (the "
                "first position itself left out); residual norm: L2 norm of the block output there, dotted: "
                "mean over the other positions.</p>"
                + table(rows, ("layer", "FFN kurtosis", "block kurtosis", "block inf norm", "sink mass",
                               "sink residual norm", "other residual norm")))


class ActivationHistogramSection(ArraySection):
    """|activation| histograms of every hooked module after training, log-log, with the peak marked."""

    title = "Activation histograms per layer"
    requires = ("outlier_histograms",)
    missing = NOT_MEASURED

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        names = [str(n) for n in arrays["outlier_modules"]]
        edges, counts, peaks = arrays["outlier_histogram_edges"], arrays["outlier_histograms"], arrays["outlier_peaks"]
        layers = sorted({n.split(".")[0] for n in names if n.startswith("layer")}, key=layer_index)
        layers += ["final_norm"] if "final_norm" in names else []  # a post-norm model has none
        fig, axes = pyplot().subplots(1, len(layers), figsize=(3.6 * len(layers), 3.2), dpi=100, squeeze=False)
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


OUTLIER_SECTIONS = (OutlierSummarySection(), LayerCurvesSection(), ActivationHistogramSection())
