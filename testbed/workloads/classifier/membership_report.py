"""The report section of the membership audit (`testbed.workloads.classifier.membership`): the
epsilon the attacks prove beside the accountant's, a table per attack and their ROC on log-log axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, table

ATTACK_LABELS = {"loss": "loss threshold (Yeom et al. 2018)", "lira": "offline LiRA (Carlini et al. 2022)"}
LOWEST_FPR = 1e-3  # the plot's left edge: the lowest rate the audit reports


def accountant_epsilon(data: RunData) -> float | None:
    """The epsilon of the run's last record that has one (a run with ``federated.privacy``), else None."""
    spent = [r["epsilon"] for r in data.metrics if "epsilon" in r]
    return float(spent[-1]) if spent else None


def plot_roc(path: Path, curves: dict[str, tuple[np.ndarray, np.ndarray]], alt: str) -> str:
    """Each attack's ROC on log-log axes from FPR 1e-3, with the diagonal (a guess), saved as ``path``; its <img>."""
    fig, ax = pyplot().subplots(figsize=(5.4, 4.6), dpi=110)
    line = np.array([LOWEST_FPR, 1.0])
    ax.plot(line, line, "k--", lw=0.8, label="chance (TPR = FPR)")
    for name, (fpr, tpr) in curves.items():
        ax.plot(fpr, tpr, lw=1.5, label=ATTACK_LABELS.get(name, name))
    ax.set(xscale="log", yscale="log", xlim=(LOWEST_FPR, 1), ylim=(LOWEST_FPR, 1),
           xlabel="false-positive rate (non-members called members)", ylabel="true-positive rate (members found)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return figure_image(fig, path, alt)


class MembershipSection(ReportSection):
    """The final global model's membership inference (``report.membership``) beside the accountant."""

    title = "Membership inference (final global model)"

    def render(self, data: RunData, out_dir: Path) -> str:
        metrics = (data.summary or {}).get("final_metrics", {})
        attacks = [name for name in ATTACK_LABELS if f"membership_{name}_epsilon_lower_bound" in metrics]
        if not attacks:
            return ""  # not asked for, or the run did not finish: no section
        block = (data.config.get("report") or {}).get("membership") or {}
        confidence = 1 - float(block.get("significance", 0.05))
        rows = [(ATTACK_LABELS[name], metrics[f"membership_{name}_tpr_at_0_1pct"],
                 metrics[f"membership_{name}_tpr_at_1pct"], metrics[f"membership_{name}_auc"],
                 metrics[f"membership_{name}_epsilon_lower_bound"]) for name in attacks]
        header = ("attack", "TPR at 0.1% FPR", "TPR at 1% FPR", "AUC", f"epsilon lower bound ({confidence:.0%})")
        curves = {name: (data.artifacts[f"membership_{name}_fpr"], data.artifacts[f"membership_{name}_tpr"])
                  for name in attacks if f"membership_{name}_fpr" in data.artifacts}
        figure = plot_roc(out_dir / "membership-roc.png", curves, "membership inference ROC") if curves else ""
        return self._answer(metrics, attacks, accountant_epsilon(data), confidence) + table(rows, header) + \
            self._sizes(metrics) + figure

    @staticmethod
    def _answer(metrics: dict[str, Any], attacks: list[str], accountant: float | None, confidence: float) -> str:
        shown = max(float(metrics[f"membership_{name}_epsilon_lower_bound"]) for name in attacks)
        ceiling = metrics.get("membership_epsilon_ceiling")
        spent = f"accountant: {accountant:.4g}" if accountant is not None else \
            "no accountant (the run has no federated.privacy)"
        line = f"{spent}; membership inference shows &gt;= {shown:.3g} (at {confidence:.0%} confidence)"
        if accountant is not None and shown > accountant:
            line += ": a violation, more than the accountant allows"
        elif ceiling is not None:
            line += f"; with these candidates it could show at most {float(ceiling):.3g}"
            if accountant is not None and float(ceiling) < accountant:
                line += ", too few to test the accountant's bound"
        return f"<p><b>{line}</b></p>"  # numbers only: nothing to escape

    @staticmethod
    def _sizes(metrics: dict[str, Any]) -> str:
        count = int(metrics.get("membership_candidates", 0))
        if not count:
            return ""
        note = (f"<p>{count} members (from the clients' training data) and {count} non-members (test data), "
                f"delta {float(metrics.get('membership_delta', 0)):g}. ")
        if 0.001 * count < 1:
            note += (f"FPR 0.1% is below 1/{count}, the smallest rate above 0 these non-members allow: its TPR "
                     "is the TPR at zero false positives. ")
        return note + "The epsilon bound is the largest of those at a few fixed FPR targets, Bonferroni-corrected " \
                      "over them.</p>"
