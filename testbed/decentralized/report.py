"""The privacy audit report (``report: {kind: privacy}``) of decentralized runs.

Sections, in page order: the privacy budget of each algorithm (sigma, target, when the run stopped
and which pair would have exceeded it); the pairwise epsilon heatmap; epsilon against
shortest-path distance, for the trained algorithms and in the setting of Fig. 1 of Cyffers, Bellet,
Upadhyay (ICML 2024); utility against epsilon; and the canary audit's lower bounds beside the
accountant's upper bounds. Every number comes from the run folder (summary and artifacts.npz).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from testbed.decentralized.comparison import crossover
from testbed.decentralized.config import ALGORITHMS
from testbed.report.plots import figure_image, plot_heatmap, plt
from testbed.report.render import RunData
from testbed.report.sections import ReportLayout, ReportSection, image, table

LABELS = {"random_walk": "random walk", "gossip": "gossip", "local_dp": "local DP"}
COLORS = {"random_walk": "tab:blue", "gossip": "tab:orange", "local_dp": "tab:green"}


def _trained(data: RunData) -> list[str]:
    return [a for a in ALGORITHMS if f"{a}.pairwise_epsilon" in data.artifacts]


def _final(data: RunData) -> dict:
    return (data.summary or {}).get("final_metrics", {})


def _figure(path: Path, draw, title: str, xlabel: str, ylabel: str, log_y: bool = False) -> str:
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
    draw(ax)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if log_y:
        ax.set_yscale("log", base=2)
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, 2.0**-16), high)  # losses below 2^-16 are nil for any purpose
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_image(fig, path, title)


class BudgetSection(ReportSection):
    """Sigma, target, planned and actual steps, and the pair that stopped the run."""

    title = "Privacy budget"

    def render(self, data: RunData, out_dir: Path) -> str:
        final, privacy = _final(data), (data.config.get("decentralized") or {}).get("privacy", {})
        if not _trained(data):
            return "<p>No algorithm was trained (accounting only, or the run has not finished).</p>"
        rows = []
        for alg in _trained(data):
            get = lambda key, default="", alg=alg: final.get(f"{alg}.{key}", default)  # used in this iteration only
            stopped = (f"target reached: stopped after step {get('stop_step')}; step {get('exceeded_step')} "
                       f"would give pair ({get('exceeded_u')} -> {get('exceeded_v')}) "
                       f"epsilon {get('exceeded_epsilon', float('nan')):.4g}"
                       ) if get("stopped_by_target") else "ran all steps"
            sigma = f"{get('sigma', float('nan')):.4g}" + (
                " (calibrated to the target)" if get("sigma_calibrated") else "")
            rows.append((LABELS[alg], sigma, get("planned_steps"), stopped, get("epsilon_at_stop", float("nan")),
                         get("epsilon_mean", float("nan")), get("test_accuracy", float("nan")), _loss(get)))
        head = (f"<p>Target: epsilon = {privacy.get('target_epsilon')}, delta = {privacy.get('delta')} "
                f"(neighbouring: {privacy.get('neighbouring')}; largest epsilon over pairs u != v).</p>")
        return head + table(rows, ("algorithm", "sigma", "planned steps", "stop", "max pairwise epsilon",
                                   "mean pairwise epsilon", "test accuracy", "test loss: start -> end"))


def _loss(get) -> str:
    """The test loss at initialisation and at the end, flagged when training ended above its start."""
    start, end = get("initial_test_loss", float("nan")), get("test_loss", float("nan"))
    # Plain text: table() escapes its cells.
    flag = " DIVERGED: ended above its start (the step size is too large for this noise)" if get(
        "loss_above_start") else ""
    return f"{start:.4g} -> {end:.4g}{flag}"


class HeatmapSection(ReportSection):
    """The final (epsilon, delta) of every ordered pair u -> v."""

    title = "Pairwise epsilon"

    def render(self, data: RunData, out_dir: Path) -> str:
        figures = []
        for alg in _trained(data):
            path = plot_heatmap(out_dir / f"pairwise-{alg}.png", data.artifacts[f"{alg}.pairwise_epsilon"],
                                "u (data owner)", "v (observer)", title=f"{LABELS[alg]}: epsilon u -> v")
            figures.append(image(path.name, f"{alg} pairwise epsilon"))
        return '<div class="grid">' + "".join(figures) + "</div>" if figures else "<p>No pairwise matrix.</p>"


class DistanceSection(ReportSection):
    """Epsilon by shortest-path distance: the trained algorithms, then the Fig. 1 comparison."""

    title = "Epsilon against shortest-path distance"

    def render(self, data: RunData, out_dir: Path) -> str:
        parts = []
        trained = _trained(data)
        if trained:
            parts.append(_figure(out_dir / "distance-trained.png",
                                 lambda ax: _bands(ax, data.artifacts, trained, "{a}.distance",
                                                   "{a}.distance_mean", "{a}.distance_min", "{a}.distance_max"),
                                 "this run: final (epsilon, delta)", "shortest-path distance", "epsilon"))
        indices = sorted({int(k.split(".")[1]) for k in data.artifacts if k.startswith("comparison.")})
        rows, figures = [], []
        for index in indices:
            found = {k.split(".", 2)[2]: v for k, v in data.artifacts.items() if k.startswith(f"comparison.{index}.")}
            name = str(found["name"][0])
            figures.append(_figure(out_dir / f"distance-comparison-{index}.png",
                                   lambda ax, f=found: _bands(ax, f, ALGORITHMS, "{a}.distance", "{a}.mean", "{a}.min",
                                                              "{a}.max"),
                                   name, "shortest-path distance", "Renyi epsilon (alpha)", log_y=True))
            where = crossover(found)
            n, walk_steps, rounds, gap = found["facts"]
            rows.append((name, int(n), f"{gap:.4g}", int(walk_steps), int(rounds),
                         ", ".join(map(str, where["walk_below_gossip_at"])) or "none",
                         where["gossip_overtakes_from"] if where["gossip_overtakes_from"] is not None else "never"))
        if rows:
            comparison = (data.config.get("decentralized") or {}).get("comparison", {})
            source = comparison.get("source")
            pairs = "all pairs (u, v)" if source is None else f"the pairs ({source}, v)"
            clipped = "yes" if comparison.get("clip_to_local", True) else "no"
            parts.append(f"<p>Setting of Fig. 1 (Cyffers et al. 2024): Renyi loss at alpha = "
                         f"{comparison.get('alpha')}, "
                         f"sigma = {comparison.get('sigma')}, random-walk view {comparison.get('random_walk_view')}, "
                         f"clipped at the local-DP loss of one release: {clipped}; "
                         f"mean over {pairs} at each distance (bands: min to max).</p>")
            parts.append(table(rows, ("topology", "n", "spectral gap", "walk steps T", "gossip rounds",
                                      "distances where random walk < gossip", "gossip at or below from distance")))
            parts.append('<div class="grid">' + "".join(figures) + "</div>")
        return "".join(parts) or "<p>Nothing to show.</p>"


def _bands(ax, arrays: dict, algorithms, x: str, mean: str, low: str, high: str) -> None:
    for alg in algorithms:
        if x.format(a=alg) not in arrays:
            continue
        xs = arrays[x.format(a=alg)]
        ax.plot(xs, arrays[mean.format(a=alg)], marker="o", markersize=3, color=COLORS[alg], label=LABELS[alg])
        ax.fill_between(xs, arrays[low.format(a=alg)], arrays[high.format(a=alg)], color=COLORS[alg], alpha=0.15)


class UtilitySection(ReportSection):
    """Test accuracy and loss against the largest pairwise epsilon reached, per algorithm."""

    title = "Utility against epsilon"

    def render(self, data: RunData, out_dir: Path) -> str:
        series = {}
        for alg in ALGORITHMS:
            points = [(r[f"{alg}.epsilon"], r[f"{alg}.test_accuracy"], r[f"{alg}.test_loss"])
                      for r in data.metrics if f"{alg}.epsilon" in r]
            if points:
                series[alg] = np.array(points)
        if not series:
            return "<p>No training records.</p>"
        figures = [_figure(out_dir / f"utility-{name}.png",
                           lambda ax, c=column: [ax.plot(p[:, 0], p[:, c], marker="o", markersize=3, color=COLORS[a],
                                                         label=LABELS[a]) for a, p in series.items()],
                           f"test {name} against epsilon", "largest pairwise epsilon so far", f"test {name}")
                   for column, name in ((1, "accuracy"), (2, "loss"))]
        return ("<p>Each point is an evaluation during training, at the (epsilon, delta) the accountant "
                "guarantees up to that step.</p><div class=\"grid\">" + "".join(figures) + "</div>")


class AuditSection(ReportSection):
    """The one-run canary audit: empirical lower bound beside the accountant's upper bound."""

    title = "Canary audit (Steinke, Nasr, Jagielski 2023)"

    def render(self, data: RunData, out_dir: Path) -> str:
        audited = [a for a in ALGORITHMS if f"{a}.audit_lower" in data.artifacts]
        if not audited:
            return "<p>No audit (set decentralized.audit.canaries).</p>"
        config = (data.config.get("decentralized") or {}).get("audit", {})
        rows, figures = [], []
        for alg in audited:
            get = lambda key, alg=alg: data.artifacts[f"{alg}.audit_{key}"]  # used in this iteration only
            for v, d, low, up in zip(get("observer"), get("distance"), get("lower"), get("upper")):
                rows.append((LABELS[alg], int(v), int(d), float(low), float(up), "yes" if low <= up else "NO"))
            figures.append(_figure(out_dir / f"audit-{alg}.png", lambda ax, g=get: _audit_plot(ax, g),
                                   f"{LABELS[alg]}: pairs ({config.get('source')}, v)", "shortest-path distance",
                                   "epsilon"))
        head = (f"<p>{config.get('canaries')} canaries at node {config.get('source')}, each included with "
                f"probability 1/2; every other node v guesses from its own view (significance "
                f"{config.get('significance')}).</p>")
        return head + '<div class="grid">' + "".join(figures) + "</div>" + table(
            rows, ("algorithm", "observer v", "distance", "empirical lower bound", "accountant upper bound",
                   "lower <= upper"))


def _audit_plot(ax, get) -> None:
    ax.scatter(get("distance"), get("upper"), marker="^", label="accountant (upper)")
    ax.scatter(get("distance"), get("lower"), marker="v", label="audit (lower)")


# The privacy report's own sections, right below the summary.
LAYOUT = ReportLayout(after_summary=(BudgetSection(), HeatmapSection(), DistanceSection(), UtilitySection(),
                                     AuditSection()))
