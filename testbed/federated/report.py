"""Robustness report sections: who the clients are, and how the strategy treated the Byzantine ones
and each client (the per-client record, clients.jsonl)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Rectangle

from testbed.federated.answer import AnswerSection
from testbed.federated.baselines_report import BaselinesSection
from testbed.federated.clients_record import ClientsRound, read_rounds
from testbed.federated.privacy_report import PrivacySection
from testbed.report.plots import figure_image, numeric_series, plot_curve, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ReportLayout, ReportSection, image, table
from testbed.report.series import is_constant
from testbed.workloads.audits import AuditSections


class ClientsSection(ReportSection):
    """Each client's label histogram (the non-IID partition) and which clients are Byzantine."""

    title = "Clients"

    def render(self, data: RunData, out_dir: Path) -> str:
        histograms = data.artifacts.get("label_histograms")
        if histograms is None:
            return "<p>No client data recorded.</p>"
        malicious = [int(i) for i in data.artifacts.get("malicious", []) if i >= 0]
        attack = (data.config.get("federated") or {}).get("attack") or {}
        who = (f"<p>Byzantine clients ({attack.get('name')}, red *): {', '.join(map(str, malicious))}</p>"
               if malicious else "<p>No Byzantine clients.</p>")
        return who + plot_label_histograms(out_dir / "client-labels.png", histograms, set(malicious))


def plot_label_histograms(path: Path, histograms: np.ndarray, byzantine: set[int]) -> str:
    """Examples per class of each client (rows), Byzantine clients' rows labelled red with a star;
    saved as ``path``, its <img>."""
    clients = len(histograms)
    fig, ax = pyplot().subplots(figsize=(5.6, 0.9 + 0.3 * min(max(clients, 6), 40)), dpi=110)
    shown = ax.imshow(histograms, cmap="viridis", aspect="auto")
    fig.colorbar(shown, ax=ax, fraction=0.05, label="examples")
    if clients <= 40:  # beyond that the labels overlap; the list above names the attackers
        ax.set_yticks(range(clients), [f"{i} *" if i in byzantine else str(i) for i in range(clients)], fontsize=7)
        for label, client in zip(ax.get_yticklabels(), range(clients)):
            if client in byzantine:
                label.set_color("tab:red")
                label.set_fontweight("bold")
    ax.set(xlabel="class", ylabel="client (partition id; red *: Byzantine)", title="examples per class and client")
    return figure_image(fig, path, "label histogram per client")


def aggregation_cost(strategy: str) -> str:
    """How the strategy's aggregation grows with the clients (`StrategyEntry.cost`): a rule that is
    quadratic in n (Krum, Bulyan) says so beside its measured time."""
    from testbed.federated.strategies import registered_strategies

    entry = registered_strategies().get(strategy)
    return entry.cost if entry is not None else "unknown strategy"


class RobustnessSection(ReportSection):
    """Final accuracy, weight given to Byzantine clients, detection quality and aggregation time."""

    title = "Robustness"

    def render(self, data: RunData, out_dir: Path) -> str:
        rounds = [r for r in data.metrics if "round" in r]
        if not rounds:
            return "<p>No rounds recorded.</p>"
        strategy = ((data.config.get("federated") or {}).get("strategy") or {}).get("name", "?")
        federated = data.config.get("federated") or {}
        threat = (federated.get("attack") or {}).get("threat_model")
        attack = (federated.get("attack") or {}).get("name", "none") + (f" ({threat} threat model)" if threat else "")
        mu = float(federated.get("proximal_mu") or 0.0)
        rows = [("strategy", strategy), ("attack", attack),
                ("local objective", f"FedProx, mu = {mu:g}" if mu > 0 else "plain SGD (mu = 0)"),
                ("test accuracy (final round)", rounds[-1].get("test_accuracy", math.nan)),
                *([("attack success rate, triggered inputs (final round)", rounds[-1]["attack_success_rate"])]
                  if "attack_success_rate" in rounds[-1] else []),
                ("clients trained per round (min)", min(r["clients_trained"] for r in rounds)),
                ("server aggregation cost, n uploads of d parameters", aggregation_cost(strategy)),
                ("client failures (all rounds)", sum(r.get("clients_failed", 0) for r in rounds))]
        for key, label in (("malicious_weight", "weight on Byzantine clients"),
                           ("detection_precision", "detection precision"),
                           ("detection_recall", "detection recall"),
                           ("attacker_auroc", "attacker AUROC by weight"),
                           ("honest_zeroed", "honest clients zeroed or flagged per round"),
                           ("aggregation_s", "server aggregation time, s")):
            values = [r[key] for r in rounds if key in r]
            if values:
                rows.append((f"{label} (mean over rounds)", float(np.mean(values))))
        return table(rows, ("measure", "value")) + self._byzantine_weight(rounds, out_dir)

    @staticmethod
    def _byzantine_weight(rounds: list[dict[str, Any]], out_dir: Path) -> str:
        """The weight given to Byzantine clients per round, or one sentence when it never changed."""
        points = numeric_series(rounds).get("malicious_weight")
        if not points:
            return ""
        if is_constant(points[1]):
            return f"<p>Weight given to Byzantine clients: {points[1][0]:.4g} in every round.</p>"
        plot_curve(out_dir / "malicious-weight.png", "weight given to Byzantine clients", "round",
                   {"malicious_weight": points}, ylabel="aggregation weight (sum over Byzantine)")
        return image("malicious-weight.png", "weight given to Byzantine clients")


def client_matrices(rounds: list[ClientsRound]) -> tuple[list[int], list[int], dict[str, np.ndarray], np.ndarray]:
    """From clients.jsonl's rounds: partition ids, round numbers, the ``weight`` (and SDEA's ``learned``)
    matrices client x round (NaN: the client did not reply), and which cells the rule flagged."""
    ids = np.unique(np.concatenate([r.ids for r in rounds]))
    numbers = [r.round for r in rounds]
    keys = ["weight", "learned"] if any(r.learned is not None for r in rounds) else ["weight"]
    matrices = {key: np.full((len(ids), len(rounds)), np.nan) for key in keys}
    flagged = np.zeros((len(ids), len(rounds)), dtype=bool)
    for col, record in enumerate(rounds):
        rows = np.searchsorted(ids, record.ids)
        for key in keys:
            values = getattr(record, key)
            if values is not None:
                matrices[key][rows, col] = values
        if record.flagged is not None:
            flagged[rows, col] = record.flagged
    return ids.tolist(), numbers, matrices, flagged


TITLES = {"weight": "aggregation weight", "learned": "SDEA learned weight (softmax, before filtering)"}
MAX_HEATMAP_ROWS = 48  # one row per client is readable up to about this many


def heatmap_rows(ids: list[int], weights: np.ndarray, byzantine: set[int]) -> list[int]:
    """The rows of the client-weight heatmap: every client up to `MAX_HEATMAP_ROWS`; beyond, the
    Byzantine clients, then the honest ones with the lowest mean weight (those a rule dropped), in
    partition order."""
    if len(ids) <= MAX_HEATMAP_ROWS:
        return list(range(len(ids)))
    attackers = [row for row, client in enumerate(ids) if client in byzantine][:MAX_HEATMAP_ROWS]
    honest = [row for row, client in enumerate(ids) if client not in byzantine]
    seen = weights[honest]
    answered = (~np.isnan(seen)).sum(axis=1)
    # a client absent from every round (no weight at all) sorts last
    means = np.where(answered > 0, np.nansum(seen, axis=1) / np.maximum(answered, 1), np.inf)
    lowest = [honest[i] for i in np.argsort(means, kind="stable")[:MAX_HEATMAP_ROWS - len(attackers)]]
    return sorted(attackers + lowest)


def plot_client_weights(path: Path, ids: list[int], numbers: list[int], matrices: dict[str, np.ndarray],
                        flagged: np.ndarray, byzantine: set[int]) -> str:
    """Client x round heatmaps of the weights, Byzantine clients' labels red with a star, flagged
    cells boxed in red; saved as ``path``, its <img>."""
    fig, axes = pyplot().subplots(1, len(matrices), figsize=(5.6 * len(matrices), 0.8 + 0.36 * max(len(ids), 6)),
                             dpi=110, squeeze=False)
    annotate = len(ids) <= 16 and len(numbers) <= 16
    for ax, (key, matrix) in zip(axes[0], matrices.items()):
        shown = ax.imshow(np.ma.masked_invalid(matrix), cmap="viridis", aspect="auto", vmin=0,
                          vmax=max(float(np.nanmax(matrix)), 1e-9))
        fig.colorbar(shown, ax=ax, fraction=0.05)
        if annotate:
            for (row, col), value in np.ndenumerate(matrix):
                if not np.isnan(value):
                    ax.text(col, row, f"{value:.3f}", ha="center", va="center", fontsize=6.5,
                            color="black" if value > 0.6 * np.nanmax(matrix) else "white")
        for row, col in zip(*np.nonzero(flagged)):
            ax.add_patch(Rectangle((col - 0.45, row - 0.42), 0.9, 0.84, fill=False, edgecolor="tab:red", lw=1.6))
        ax.set_xticks(range(len(numbers)), [str(n) for n in numbers], fontsize=7)
        ax.set_yticks(range(len(ids)), [f"{i} *" if i in byzantine else str(i) for i in ids], fontsize=8)
        for label, client in zip(ax.get_yticklabels(), ids):
            if client in byzantine:
                label.set_color("tab:red")
                label.set_fontweight("bold")
        ax.set(xlabel="round", ylabel="client (partition id; red *: Byzantine)",
               title=TITLES[key] + (" (red box: flagged)" if key == "weight" and flagged.any() else ""))
    return figure_image(fig, path, "client weight per round")


def plot_auroc(path: Path, xs: list[float], ys: list[float], scored_by: str) -> str:
    """The attacker AUROC per round on [0, 1], with chance marked; saved as ``path``, its <img>."""
    fig, ax = pyplot().subplots(figsize=(5.5, 3.4), dpi=110)
    ax.plot(xs, ys, marker="o", markersize=3, label="attacker AUROC")
    ax.axhline(0.5, color="gray", ls="--", lw=0.8, label="chance")
    ax.set(title=f"Byzantine vs honest by {scored_by}", xlabel="round", ylabel="AUROC", ylim=(-0.03, 1.03))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return figure_image(fig, path, "attacker AUROC per round")


class ClientWeightsSection(ReportSection):
    """Each client's weight in every round, how well the weights separate the Byzantine clients
    (AUROC), and which honest clients the rule zeroed or flagged in which rounds."""

    title = "Client weights per round"

    def render(self, data: RunData, out_dir: Path) -> str:
        rounds = read_rounds(data.path)
        if not rounds:
            return ""  # no rule with per-client weights, or a run from before the record
        ids, numbers, matrices, flagged = client_matrices(rounds)
        byzantine = {int(client) for record in rounds for client in record.ids[record.byzantine]}
        shown = heatmap_rows(ids, matrices["weight"], byzantine)
        note = (f" Of the {len(ids)} clients the heatmap shows {len(shown)}: the Byzantine ones, then the honest "
                "ones with the lowest mean weight." if len(shown) < len(ids) else "")
        parts = [f"<p>Byzantine clients (red, *): {', '.join(map(str, sorted(byzantine))) or 'none'}. "
                 f"A red box marks a client the rule flagged that round.{note} Per-client record: clients.jsonl.</p>",
                 plot_client_weights(out_dir / "client-weights.png", [ids[r] for r in shown], numbers,
                                     {k: m[shown] for k, m in matrices.items()}, flagged[shown], byzantine)]
        auroc = numeric_series([r for r in data.metrics if "round" in r]).get("attacker_auroc")
        if auroc:
            scored_by = "learned weight" if "learned" in matrices else "weight"
            parts.append(plot_auroc(out_dir / "attacker-auroc.png", *auroc, scored_by))
        parts.append(self._dropped_table(rounds, data))
        return "".join(parts)

    @staticmethod
    def _dropped_table(rounds: list[ClientsRound], data: RunData) -> str:
        """One row per honest client the rule ever zeroed or flagged: its data and the rounds."""
        hit: dict[int, list[int]] = {}
        for record in rounds:
            for client in record.honest_dropped().tolist():
                hit.setdefault(client, []).append(record.round)
        if not hit:
            return "<p>No honest client was zeroed or flagged in any round.</p>"
        histograms = data.artifacts.get("label_histograms")
        rows = []
        for client, hit_rounds in sorted(hit.items()):
            examples, classes = "?", "?"
            if histograms is not None and client < len(histograms):
                counts = histograms[client]
                examples = str(int(counts.sum()))
                top = np.argsort(counts)[::-1][:3]
                classes = ", ".join(f"{c} ({counts[c] / max(counts.sum(), 1):.0%})" for c in top if counts[c])
            rows.append((client, f"{len(hit_rounds)} of {len(rounds)}", ", ".join(map(str, hit_rounds)),
                         examples, classes))
        header = ("client", "rounds zeroed or flagged", "which rounds", "examples", "main classes (share)")
        return "<p>Honest clients the rule gave (near) zero weight or flagged:</p>" + table(rows, header)


# The robustness report's own sections, right below the summary, in this order.
# The comparison (the answer in words, then the arms' table and chart) before the run's own details.
LAYOUT = ReportLayout(after_summary=(AnswerSection(), BaselinesSection(), RobustnessSection(), PrivacySection(),
                                     ClientWeightsSection(), ClientsSection(), AuditSections()),
                      covered=frozenset({"malicious_weight", "attacker_auroc"}))
# A federated run's privacy report (``report.kind: privacy``): what was spent, audited and lost first.
PRIVACY_LAYOUT = ReportLayout(after_summary=(AnswerSection(), PrivacySection(), BaselinesSection(),
                                             RobustnessSection(), ClientWeightsSection(), ClientsSection(),
                                             AuditSections()),
                              covered=LAYOUT.covered)
