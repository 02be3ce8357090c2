"""The privacy audit report (``report: {kind: privacy}``) of decentralized runs.

Sections, in page order: the privacy budget of each algorithm (sigma, target, when the run stopped
and which pair would have exceeded it); the pairwise epsilon heatmap; epsilon against
shortest-path distance, for the trained algorithms (each at its own, calibrated noise) beside the
setting of Fig. 1 of Cyffers, Bellet, Upadhyay (ICML 2024) (all at one noise); utility against
epsilon, with the noise-free arms (``privacy.non_private_baseline``) as reference lines; and the
canary audit's lower bounds beside the accountant's upper bounds and the audit's power, with a
verdict per pair. Every number comes from the run folder (summary and artifacts.npz).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from testbed.decentralized.audit import audit_power, guess_counts
from testbed.decentralized.comparison import crossover
from testbed.decentralized.config import ALGORITHMS, BASELINE
from testbed.report.plots import figure_image, plot_heatmap, plt
from testbed.report.render import RunData
from testbed.report.sections import ReportLayout, ReportSection, image, table

LABELS = {"random_walk": "random walk", "gossip": "gossip", "local_dp": "local DP"}
COLORS = {"random_walk": "tab:blue", "gossip": "tab:orange", "local_dp": "tab:green"}
MARKERS = {"random_walk": "o", "gossip": "s", "local_dp": "^"}
DISTANCE = "shortest-path distance (hops)"
NARROW = 0.01  # a spread below 1% of the largest value is "all within [a, b]", not a curve shape


def _trained(data: RunData) -> list[str]:
    return [a for a in ALGORITHMS if f"{a}.pairwise_epsilon" in data.artifacts]


def _final(data: RunData) -> dict:
    return (data.summary or {}).get("final_metrics", {})


def _privacy(data: RunData) -> dict:
    return (data.config.get("decentralized") or {}).get("privacy", {})


def _epsilon_label(data: RunData) -> str:
    """The y label of an (epsilon, delta) axis: epsilon is in nats (a log-likelihood ratio)."""
    return f"epsilon at delta = {_privacy(data).get('delta')} (nats)"


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
        target = privacy.get("target_epsilon")
        aim = f"Target: epsilon = {target}" if target is not None else "No epsilon target (sigma as set)"
        head = (f"<p>{aim}, delta = {privacy.get('delta')} "
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
    """The final (epsilon, delta) of every ordered pair u -> v; a matrix with one value for every
    pair is one line of text instead (a one-colour map says nothing)."""

    title = "Pairwise epsilon"

    def render(self, data: RunData, out_dir: Path) -> str:
        figures, constant = [], []
        for alg in _trained(data):
            eps = np.array(data.artifacts[f"{alg}.pairwise_epsilon"], dtype=np.float64)
            np.fill_diagonal(eps, np.nan)  # u = v is no pair: left blank, out of the colour range
            pairs = eps[np.isfinite(eps)]
            if pairs.size and np.ptp(pairs) <= 1e-9 * max(abs(pairs.max()), 1.0):
                constant.append(f"{LABELS[alg]}: every pair u -> v at epsilon {pairs.max():.4g}")
                continue
            path = plot_heatmap(out_dir / f"pairwise-{alg}.png", eps, "u (data owner)", "v (observer)",
                                title=f"{LABELS[alg]}: epsilon u -> v", value_label=_epsilon_label(data),
                                cells="pairs")
            figures.append(image(path.name, f"{alg} pairwise epsilon"))
        parts = [f"<p>{html.escape('; '.join(constant))} (no heatmap: one value).</p>"] if constant else []
        if figures:
            parts.append('<div class="grid">' + "".join(figures) + "</div>")
        return "".join(parts) or "<p>No pairwise matrix.</p>"


class DistanceSection(ReportSection):
    """Epsilon by shortest-path distance: the trained algorithms at their own (calibrated) noise,
    beside the Fig. 1 comparison at one noise for all."""

    title = "Epsilon against shortest-path distance"

    def render(self, data: RunData, out_dir: Path) -> str:
        figures, notes = [], []
        trained = _trained(data)
        if trained:
            figures.append(_trained_distance_figure(data, trained, out_dir / "distance-trained.png"))
            notes.append(_run_note(data, trained))
        compared, rows = _comparison_figures(data, out_dir)
        if rows:
            notes.append(_comparison_note(data))
        if not figures + compared:
            return "<p>Nothing to show.</p>"
        body = "".join(notes) + '<div class="grid">' + "".join(figures + compared) + "</div>"
        if rows:
            body += table(rows, ("topology", "n", "spectral gap", "walk steps T", "gossip rounds",
                                 "distances where random walk < gossip", "gossip at or below from distance"))
        return body + "<p>Curves that coincide are drawn once, their names joined by =.</p>"


def _run_note(data: RunData, trained: list[str]) -> str:
    """Why the run's curves are not the algorithms' comparison: each has its own noise."""
    sigmas = ", ".join(f"{LABELS[a]} {_final(data).get(f'{a}.sigma', float('nan')):.4g}" for a in trained)
    how = "calibrated so that its worst pair ends at" if _calibrated(data, trained) else "against"
    return (f"<p>This run (the first chart): each algorithm at its own noise (sigma: {sigmas}), {how} the "
            "target (dashed). Its curves say how the bound falls with distance at that noise, not which "
            "algorithm leaks less: with the noise differing too, they may disagree with the comparison at "
            "equal noise beside them, which is the one that compares the algorithms.</p>")


def _comparison_figures(data: RunData, out_dir: Path) -> tuple[list[str], list[tuple]]:
    """The Fig. 1 profile of each compared topology (one noise for all) and its table row."""
    comparison = (data.config.get("decentralized") or {}).get("comparison", {})
    indices = sorted({int(k.split(".")[1]) for k in data.artifacts if k.startswith("comparison.")})
    figures, rows = [], []
    for index in indices:
        found = {k.split(".", 2)[2]: v for k, v in data.artifacts.items() if k.startswith(f"comparison.{index}.")}
        name = str(found["name"][0])
        figures.append(_figure(out_dir / f"distance-comparison-{index}.png",
                               lambda ax, f=found: _bands(ax, f, ALGORITHMS, "{a}.distance", "{a}.mean", "{a}.min",
                                                          "{a}.max"),
                               f"{name}: equal noise, sigma = {comparison.get('sigma')}", DISTANCE,
                               f"Renyi epsilon at alpha = {comparison.get('alpha')} (nats)", log_y=True))
        where = crossover(found)
        n, walk_steps, rounds, gap = found["facts"]
        rows.append((name, int(n), f"{gap:.4g}", int(walk_steps), int(rounds),
                     ", ".join(map(str, where["walk_below_gossip_at"])) or "none",
                     where["gossip_overtakes_from"] if where["gossip_overtakes_from"] is not None else "never"))
    return figures, rows


def _comparison_note(data: RunData) -> str:
    comparison = (data.config.get("decentralized") or {}).get("comparison", {})
    source = comparison.get("source")
    pairs = "all pairs (u, v)" if source is None else f"the pairs ({source}, v)"
    clipped = "yes" if comparison.get("clip_to_local", True) else "no"
    return (f"<p>Setting of Fig. 1 (Cyffers et al. 2024), every algorithm at the same noise: Renyi "
            f"loss at alpha = {comparison.get('alpha')}, "
            f"sigma = {comparison.get('sigma')}, random-walk view {comparison.get('random_walk_view')}, "
            f"clipped at the local-DP loss of one release: {clipped}; "
            f"mean over {pairs} at each distance (bands: min to max).</p>")


def _calibrated(data: RunData, trained: list[str]) -> bool:
    return all(_final(data).get(f"{a}.sigma_calibrated") for a in trained)


def _trained_distance_figure(data: RunData, trained: list[str], path: Path) -> str:
    """The run's epsilon by distance on an axis from 0, with the target: a spread of a hundredth
    on an axis fit to the data would look like a cliff."""
    arrays, target = data.artifacts, _privacy(data).get("target_epsilon")
    values = np.concatenate([arrays[f"{a}.distance_mean"] for a in trained])
    title = "this run: final epsilon, " + ("calibrated noise" if _calibrated(data, trained) else "the noise set")
    if values.size and np.ptp(values) < NARROW * abs(values.max()):
        title += f"\n(all within [{values.min():.4g}, {values.max():.4g}])"

    def draw(ax) -> None:
        _bands(ax, arrays, trained, "{a}.distance", "{a}.distance_mean", "{a}.distance_min", "{a}.distance_max")
        if target is not None:
            ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
        top = max([float(values.max()) if values.size else 0.0, target or 0.0])
        ax.set_ylim(0, 1.15 * top or 1.0)  # head room: lines at the target would sit on the frame

    return _figure(path, draw, title, DISTANCE, _epsilon_label(data))


def _bands(ax, arrays: dict, algorithms, x: str, mean: str, low: str, high: str) -> None:
    """Mean line and min-max band per algorithm; algorithms whose curves coincide are drawn once
    with their names joined (otherwise the later one hides the earlier, as gossip behind local DP)."""
    drawn: list[tuple[list[str], tuple[np.ndarray, ...]]] = []
    for alg in algorithms:
        if x.format(a=alg) not in arrays:
            continue
        curve = tuple(np.asarray(arrays[key.format(a=alg)], dtype=np.float64) for key in (x, mean, low, high))
        for names, other in drawn:
            if all(a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=0) for a, b in zip(curve, other)):
                names.append(alg)
                break
        else:
            drawn.append(([alg], curve))
    for names, (xs, ys, lows, highs) in drawn:
        first = names[0]
        ax.plot(xs, ys, marker=MARKERS[first], markersize=4, color=COLORS[first],
                label=" = ".join(LABELS[a] for a in names))
        ax.fill_between(xs, lows, highs, color=COLORS[first], alpha=0.15)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


class UtilitySection(ReportSection):
    """Test accuracy and loss against the largest pairwise epsilon reached, per algorithm, with the
    noise-free arms' final values as reference lines."""

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
        final = _final(data)
        baseline = {a: (final[f"{BASELINE}.{a}.test_accuracy"], final[f"{BASELINE}.{a}.test_loss"])
                    for a in series if f"{BASELINE}.{a}.test_accuracy" in final}
        units = {"accuracy": "test accuracy (fraction correct)", "loss": "test loss (cross-entropy, nats)"}
        figures = [_figure(out_dir / f"utility-{name}.png",
                           lambda ax, c=column: _utility(ax, series, baseline, c),
                           f"test {name} against epsilon", f"largest pairwise {_epsilon_label(data)} so far",
                           units[name])
                   for column, name in ((1, "accuracy"), (2, "loss"))]
        note = ("Dashed: the same algorithm with no noise (privacy.non_private_baseline), at its last step."
                if baseline else "No noise-free reference (set decentralized.privacy.non_private_baseline: true).")
        return ("<p>Each point is an evaluation during training, at the (epsilon, delta) the accountant "
                f"guarantees up to that step. {note}</p><div class=\"grid\">" + "".join(figures) + "</div>")


def _utility(ax, series: dict[str, np.ndarray], baseline: dict[str, tuple[float, float]], column: int) -> None:
    for alg, points in series.items():
        ax.plot(points[:, 0], points[:, column], marker=MARKERS[alg], markersize=3, color=COLORS[alg],
                label=LABELS[alg])
        if alg in baseline:
            ax.axhline(baseline[alg][column - 1], color=COLORS[alg], linestyle="--", linewidth=1,
                       label=f"{LABELS[alg]}, no noise")


class AuditSection(ReportSection):
    """The one-run canary audit: empirical lower bound beside the accountant's upper bound and the
    most the audit could show (its power), with a verdict per pair."""

    title = "Canary audit (Steinke, Nasr, Jagielski 2023)"

    def render(self, data: RunData, out_dir: Path) -> str:
        audited = [a for a in ALGORITHMS if f"{a}.audit_lower" in data.artifacts]
        if not audited:
            return "<p>No audit (set decentralized.audit.canaries).</p>"
        config = (data.config.get("decentralized") or {}).get("audit", {})
        significance, canaries = float(config.get("significance", 0.05)), int(config.get("canaries", 0))
        rows, figures, tallies = [], [], []
        for alg in audited:
            get = lambda key, alg=alg: data.artifacts[f"{alg}.audit_{key}"]  # used in this iteration only
            power = _power(data, alg, canaries, significance)
            verdicts = [_verdict(float(low), float(up), power) for low, up in zip(get("lower"), get("upper"))]
            for v, d, low, up, verdict in zip(get("observer"), get("distance"), get("lower"), get("upper"), verdicts):
                rows.append((LABELS[alg], int(v), int(d), float(low), float(up), power, verdict))
            tallies.append(_tally(alg, verdicts))
            figures.append(_figure(out_dir / f"audit-{alg}.png", lambda ax, g=get, p=power: _audit_plot(ax, g, p),
                                   f"{LABELS[alg]}: pairs ({config.get('source')}, v)",
                                   f"shortest-path distance from node {config.get('source')} (hops)",
                                   _epsilon_label(data)))
        return (_audit_head(config, canaries, significance) + "<ul>" + "".join(tallies) + "</ul>"
                + '<div class="grid">' + "".join(figures) + "</div>"
                + table(rows, ("algorithm", "observer v", "distance", "empirical lower bound",
                               "accountant upper bound", "at most detectable (power)", "verdict")))


def _audit_head(config: dict, canaries: int, significance: float) -> str:
    """What the audit did, how sure its bounds are, and what its power means."""
    return (f"<p>{canaries} canaries at node {config.get('source')}, each included with probability 1/2; "
            f"every other node v guesses from its own view. Each lower bound holds with confidence "
            f"{1 - significance:.0%} (significance {significance:g}, Bonferroni-corrected over the "
            f"{len(guess_counts(canaries))} guess counts tried). Audit power: the largest lower bound these "
            "canaries let even a perfect attacker certify; an accountant's epsilon above it cannot be "
            "tested by this audit, so a low lower bound there says nothing about the accountant.</p>")


def _power(data: RunData, alg: str, canaries: int, significance: float) -> float:
    """The audit's power as the run recorded it (with its draw of canaries); for a run from before
    it was recorded, the bound over every draw (all guesses right) from the config."""
    recorded = _final(data).get(f"{alg}.audit_power")
    if recorded is not None:
        return float(recorded)
    return audit_power(canaries, float(_privacy(data).get("delta", 1e-5)), significance)


def _verdict(lower: float, upper: float, power: float) -> str:
    """What one pair's audit says: a violation, nothing (the bound is beyond the audit's reach), or
    how close the audit comes to the bound."""
    if lower > upper:
        return "VIOLATION (accountant wrong)"
    if power < upper:
        return f"audit too weak to test the bound (it can show at most {power:.3g})"
    return f"tightness lower/upper = {lower / upper:.2f}" if upper > 0 else "tightness: upper bound 0"


def _tally(alg: str, verdicts: list[str]) -> str:
    """One line per algorithm: how many pairs fall under each kind of verdict."""
    kinds = {"violation": sum(v.startswith("VIOLATION") for v in verdicts),
             "too weak to test": sum(v.startswith("audit too weak") for v in verdicts)}
    kinds["tested"] = len(verdicts) - sum(kinds.values())
    counts = ", ".join(f"{count} {kind}" for kind, count in kinds.items() if count)
    return f"<li>{LABELS[alg]}: {len(verdicts)} pairs: {counts}</li>"


def _audit_plot(ax, get, power: float) -> None:
    ax.scatter(get("distance"), get("upper"), marker="^", label="accountant (upper)")
    ax.scatter(get("distance"), get("lower"), marker="v", label="audit (lower)")
    ax.axhline(power, color="black", linestyle="--", linewidth=1, label=f"audit power (at most {power:.3g})")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# The privacy report's own sections, right below the summary.
LAYOUT = ReportLayout(after_summary=(BudgetSection(), DistanceSection(), UtilitySection(), AuditSection(),
                                     HeatmapSection()))
