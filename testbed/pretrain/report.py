"""Report sections for ``report.kind: pretraining``: packing side by side, lengths, losses, fact recall.

The packing statistics and length data come from the run's artifacts (written when the corpus was
prepared, for every packing method on the same documents); the curves and the fact-recall
results come from metrics.jsonl.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.pretrain.outlier_report import OUTLIER_SECTIONS
from testbed.report.plots import figure_image, plot_curve, pyplot
from testbed.report.sections import ArraySection, ReportLayout, ReportSection, image, table

if TYPE_CHECKING:
    from testbed.report.render import RunData

PERCENT_STATS = ("excess_sequence_share", "fill_rate", "padding_share", "truncated_share", "forced_truncated_share")


class PackingStatsSection(ArraySection):
    """Sequence count, fill and truncations of every packing method on this run's training documents."""

    title = "Packing, side by side"
    requires = ("packing_stats",)
    missing = ""  # left out of the page

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        methods = [str(m) for m in arrays["packing_methods"]]
        used = (data.config.get("pretrain") or {}).get("packing", {}).get("method", "best_fit")
        header = ("statistic", *(f"{m} (this run)" if m == used else m for m in methods))
        rows = []
        for column, name in enumerate(str(n) for n in arrays["packing_stat_names"]):
            values = arrays["packing_stats"][:, column]
            if name in PERCENT_STATS:
                rows.append((f"{name} (%)", *(f"{100 * v:.4f}" for v in values)))
            else:
                rows.append((name, *(f"{v:.6g}" for v in values)))
        return table(rows, header) + (
            "<p>truncated_share: documents spread over more than one sequence; forced_truncated_share: those "
            "longer than the context, which every method must cut. excess_sequence_share: sequences beyond "
            "ceil(tokens / context), the bound concatenation attains.</p>")


class LengthHistogramsSection(ArraySection):
    """Document lengths against the context length, and tokens per packed sequence for each method."""

    title = "Length histograms"
    requires = ("document_lengths",)
    missing = ""

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        context = int(arrays["context_length"])
        fig, ax = pyplot().subplots(figsize=(5.5, 3.4), dpi=110)
        lengths = arrays["document_lengths"]
        ax.hist(np.minimum(lengths, 4 * context), bins=60, color="#4c72b0")
        ax.axvline(context, color="#c44e52", linestyle="--", label=f"context length {context}")
        ax.set(title="Document lengths (clipped at 4x context)", xlabel="tokens", ylabel="documents")
        ax.legend(fontsize=8)
        lengths_image = figure_image(fig, out_dir / "document-lengths.png", "document lengths")
        fig, ax = pyplot().subplots(figsize=(5.5, 3.4), dpi=110)
        for method in (str(m) for m in arrays["packing_methods"]):
            ax.hist(arrays[f"sequence_tokens_{method}"], bins=40, histtype="step", linewidth=1.4, label=method)
        ax.set(title="Document tokens per packed sequence", xlabel="tokens", ylabel="sequences (log scale)")
        ax.set_yscale("log")  # full sequences dominate; the partial ones are what differs
        ax.legend(fontsize=8)
        fill_image = figure_image(fig, out_dir / "sequence-fill.png", "tokens per sequence")
        return '<div class="grid">' + lengths_image + fill_image + "</div>"


class LossCurvesSection(ReportSection):
    """Training and held-out loss on one plot, and throughput per process."""

    title = "Loss curves"

    def render(self, data: RunData, out_dir: Path) -> str:
        records = [r for r in data.metrics if "train_loss" in r]
        if not records:
            return "<p>No training records yet.</p>"
        steps = [r["step"] for r in records]
        # A key a model family does not report (the ViT has no perplexity) is left out.
        def curves(keys: tuple[str, ...]) -> dict:
            return {key: (steps, [r[key] for r in records]) for key in keys if key in records[-1]}
        plot_curve(out_dir / "pretrain-loss.png", "loss", "step", curves(("train_loss", "heldout_loss")),
                   ylabel="cross-entropy (nats per token)")
        plot_curve(out_dir / "pretrain-throughput.png", "tokens/s per process", "step",
                   curves(("tokens_per_s_per_process", "document_tokens_per_s_per_process")),
                   ylabel="tokens per second per process")
        last = records[-1]
        rows = [(key, last[key]) for key in ("train_loss", "heldout_loss", "heldout_ppl", "test_accuracy",
                                             "tokens_per_s_per_process", "document_tokens_per_s_per_process")
                if key in last]
        return table(rows, ("final", "value")) + '<div class="grid">' + image("pretrain-loss.png", "loss") + \
            image("pretrain-throughput.png", "throughput") + "</div>"


class FactRecallSection(ReportSection):
    """Closed-domain fact recall on held-out documents (corpus source ``factrecall``)."""

    title = "Fact recall"

    def render(self, data: RunData, out_dir: Path) -> str:
        final = [r for r in data.metrics if "fact_recall" in r]
        if not final:
            return ""  # not a fact-recall run (pretrain.corpus.source: factrecall): left out
        last = final[-1]
        rows = [("questions", int(last["fact_questions"])),
                ("recall (answer is the stated fact)", last["fact_recall"]),
                ("invented (answer not in the context)", last["fact_invented_rate"]),
                ("mix-up (another fact of the context)", last["fact_mixup_rate"])]
        return table(rows, ("outcome", "share"))


# The pretraining report's own sections: the losses, fact recall and outliers first (what the run
# measured), the packing statistics after the generic curves.
LAYOUT = ReportLayout(after_summary=(LossCurvesSection(), FactRecallSection(), *OUTLIER_SECTIONS),
                      after_metrics=(PackingStatsSection(), LengthHistogramsSection()),
                      covered=frozenset({"train_loss", "heldout_loss", "tokens_per_s_per_process",
                                         "document_tokens_per_s_per_process", "avg_kurtosis", "max_inf_norm"}))
