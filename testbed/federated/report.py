"""Robustness report sections: who the clients are, and how the strategy treated the Byzantine ones."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from testbed.report.plots import numeric_series, plot_curve, plot_heatmap
from testbed.report.render import RunData
from testbed.report.sections import ReportLayout, ReportSection, image, table
from testbed.workloads.oodrobust.report import OodAuditSection


class ClientsSection(ReportSection):
    """Each client's label histogram (the non-IID partition) and which clients are Byzantine."""

    title = "Clients"

    def render(self, data: RunData, out_dir: Path) -> str:
        histograms = data.artifacts.get("label_histograms")
        if histograms is None:
            return "<p>No client data recorded.</p>"
        malicious = [int(i) for i in data.artifacts.get("malicious", []) if i >= 0]
        path = plot_heatmap(out_dir / "client-labels.png", histograms, "client (partition id)", "class",
                            title="label histogram per client", annotate=False)
        attack = (data.config.get("federated") or {}).get("attack") or {}
        who = (f"<p>Byzantine clients ({attack.get('name')}): {', '.join(map(str, malicious))}</p>"
               if malicious else "<p>No Byzantine clients.</p>")
        return who + image(path.name, "label histogram per client")


class RobustnessSection(ReportSection):
    """Final accuracy, weight given to Byzantine clients, detection quality and aggregation time."""

    title = "Robustness"

    def render(self, data: RunData, out_dir: Path) -> str:
        rounds = [r for r in data.metrics if "round" in r]
        if not rounds:
            return "<p>No rounds recorded.</p>"
        strategy = ((data.config.get("federated") or {}).get("strategy") or {}).get("name", "?")
        rows = [("strategy", strategy), ("final test accuracy", rounds[-1].get("test_accuracy", math.nan)),
                ("clients trained per round (min)", min(r["clients_trained"] for r in rounds)),
                ("client failures (all rounds)", sum(r.get("clients_failed", 0) for r in rounds))]
        for key, label in (("malicious_weight", "weight on Byzantine clients (mean)"),
                           ("detection_precision", "detection precision (mean)"),
                           ("detection_recall", "detection recall (mean)"),
                           ("aggregation_s", "server aggregation time, s (mean)")):
            values = [r[key] for r in rounds if key in r]
            if values:
                rows.append((label, float(np.mean(values))))
        series = numeric_series(rounds)
        figures = ""
        if "malicious_weight" in series:
            plot_curve(out_dir / "malicious-weight.png", "weight given to Byzantine clients", "round",
                       {"malicious_weight": series["malicious_weight"]})
            figures = image("malicious-weight.png", "weight given to Byzantine clients")
        return table(rows, ("measure", "value")) + figures


# Registered first: each after_summary section goes above the earlier ones, so this one ends up below the two.
# The robustness report's own sections, right below the summary.
LAYOUT = ReportLayout(after_summary=(RobustnessSection(), ClientsSection(), OodAuditSection()))
