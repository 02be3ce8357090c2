"""The privacy audit report (``report: {kind: privacy}``) of decentralized runs.

Sections, in page order: the answer (per algorithm: the epsilon the accountant guarantees, what the
canary audit says of it, and what the noise cost against the same run without noise); the pairwise
epsilon heatmap (or one sentence when every pair spends about the same); the privacy budget of each
algorithm (sigma, target, when the run stopped and which pair would have exceeded it); the canary
audit's lower bounds beside the accountant's upper bounds and the audit's power, one row per
algorithm and verdict; the test loss of every arm on one chart, in data passes; utility against
epsilon, with the noise-free arms (``privacy.non_private_baseline``) as reference lines; and
epsilon against shortest-path distance, for the trained algorithms (each at its own, calibrated
noise; left out when it is flat) beside the setting of Fig. 1 of Cyffers, Bellet, Upadhyay (ICML
2024) (all at one noise). Every number comes from the run folder (summary and artifacts.npz).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from testbed.decentralized.audit import guess_counts
from testbed.decentralized.audit_results import (
    CONSISTENT,
    TOO_WEAK,
    VIOLATION,
    PairAudit,
    algorithm_power,
    final_metrics,
    pair_audits,
    privacy_block,
    trained_algorithms,
)
from testbed.decentralized.comparison import crossover
from testbed.decentralized.config import ALGORITHMS, BASELINE
from testbed.privacy.one_run import canaries_needed, power_peak
from testbed.report.plots import figure_image, plot_heatmap, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ReportLayout, ReportSection, image, table

LABELS = {"random_walk": "random walk", "gossip": "gossip", "local_dp": "local DP"}
COLORS = {"random_walk": "tab:blue", "gossip": "tab:orange", "local_dp": "tab:green"}
MARKERS = {"random_walk": "o", "gossip": "s", "local_dp": "^"}
DISTANCE = "shortest-path distance (hops)"
NARROW = 0.01  # a spread below 1% of the largest value is "all within [a, b]", not a curve shape
# The metrics the privacy page charts itself (over data passes), left out of the generic curves
# (over "step", which would put a walk step and a gossip iteration at one x).
CHARTED = ("test_loss", "train_loss", "test_accuracy", "epsilon")


def _epsilon_label(data: RunData) -> str:
    """The y label of an (epsilon, delta) axis: epsilon is in nats (a log-likelihood ratio)."""
    return f"epsilon at delta = {privacy_block(data).get('delta')} (nats)"


def _figure(path: Path, draw, title: str, xlabel: str, ylabel: str, log_y: bool = False) -> str:
    fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=110)
    draw(ax)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if log_y:
        ax.set_yscale("log", base=2)
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, 2.0**-16), high)  # losses below 2^-16 are nil for any purpose
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_image(fig, path, title)


def _narrow(values: np.ndarray) -> bool:
    """Whether finite ``values`` spread over less than `NARROW` of the largest (a constant included)."""
    return bool(values.size) and float(np.ptp(values)) < NARROW * abs(float(values.max())) + 1e-12


class AnswerSection(ReportSection):
    """The privacy question answered first: per algorithm, the epsilon the accountant guarantees
    (its largest pair), what the canary audit says of it, and what the noise cost against the same
    algorithm trained without noise; then why an audit could not test its bound, and why a private
    arm that ends above its noise-free one does."""

    title = "Privacy: epsilon spent, its audit, its cost"

    def render(self, data: RunData, out_dir: Path) -> str:
        trained = trained_algorithms(data)
        if not trained:
            return ""  # the budget section says that nothing was trained
        final, privacy = final_metrics(data), privacy_block(data)
        rows = [(LABELS[alg], final.get(f"{alg}.epsilon_at_stop", float("nan")), _audit_cell(data, alg),
                 _cost(final, alg, "test_accuracy"), _cost(final, alg, "test_loss"))
                for alg in trained]
        audit = (data.config.get("decentralized") or {}).get("audit", {})
        audited = (f"the canary audit's verdict on the pairs ({audit.get('source')}, v)"
                   if any(f"{a}.audit_lower" in data.artifacts for a in trained) else "no audit")
        head = (f"<p>Epsilon at delta = {privacy.get('delta')}: the largest over ordered pairs of nodes, "
                f"as the accountant guarantees it; {audited}; the cost: the same algorithm, steps and "
                "step size with no noise (private vs no noise, difference).</p>")
        notes = [_untestable_note(data, trained), *(_above_no_noise_note(data, alg) for alg in trained)]
        table_html = table(rows, ("algorithm", "epsilon spent (accountant)", "audit",
                                  "test accuracy: private vs no noise", "test loss: private vs no noise"))
        return (head + f'<div id="privacy-answer">{table_html}</div>'
                + "".join(f"<p>{html.escape(note)}</p>" for note in notes if note))


def _cost(final: dict, alg: str, metric: str) -> str:
    """``private vs no noise (difference)``, or the private value alone without a noise-free arm."""
    private, reference = final.get(f"{alg}.{metric}"), final.get(f"{BASELINE}.{alg}.{metric}")
    if private is None:
        return ""
    if reference is None:
        return f"{private:.3f} (no noise-free arm)"
    return f"{private:.3f} vs {reference:.3f} ({private - reference:+.3f})"


def _audit_cell(data: RunData, alg: str) -> str:
    """The audit's verdicts of one algorithm in a few words: counts of pairs per verdict."""
    if f"{alg}.audit_lower" not in data.artifacts:
        return "no audit"
    power = algorithm_power(data, alg)
    pairs = pair_audits(data, alg, power)
    parts = []
    for kind in (VIOLATION, TOO_WEAK, CONSISTENT):
        group = [p for p in pairs if p.kind == kind]
        if not group:
            continue
        lower, upper = max(p.lower for p in group), max(p.upper for p in group)
        detail = {VIOLATION: f"lower bound up to {lower:.3g} > upper {min(p.upper for p in group):.3g}",
                  TOO_WEAK: f"the audit can show at most {power:.3g} < {upper:.3g}",
                  CONSISTENT: f"lower bound up to {lower:.3g} <= {upper:.3g}, power {power:.3g}"}[kind]
        name = "VIOLATION" if kind == VIOLATION else kind
        parts.append(f"{name} on {len(group)} of {len(pairs)} pairs ({detail})")
    return "; ".join(parts)


def _untestable_note(data: RunData, trained: list[str]) -> str:
    """One sentence when some pair's bound is beyond the audit's power: the canaries it would take."""
    weak = {alg: [p for p in pair_audits(data, alg, algorithm_power(data, alg)) if p.kind == TOO_WEAK]
            for alg in trained if f"{alg}.audit_lower" in data.artifacts}
    weak = {alg: pairs for alg, pairs in weak.items() if pairs}
    if not weak:
        return ""
    config = (data.config.get("decentralized") or {}).get("audit", {})
    canaries, significance = int(config.get("canaries", 0)), float(config.get("significance", 0.05))
    delta = float(privacy_block(data).get("delta", 1e-5))
    bound = max(p.upper for pairs in weak.values() for p in pairs)
    power = min(algorithm_power(data, alg) for alg in weak)
    needed = canaries_needed(bound, delta, significance)
    which = ", ".join(LABELS[a] for a in weak)
    start = (f"The audit cannot test epsilon {bound:.3g} ({which}): {canaries} canaries let even a perfect "
             f"attacker certify at most {power:.3g}")
    if needed is not None:
        return f"{start}; about {needed} canaries (half of them drawn in) would, or test a smaller epsilon."
    best, best_count = power_peak(delta, significance)
    return (f"{start}, and no number of canaries can at delta {delta:g} (the most, about {best:.3g}, comes with "
            f"about {best_count}): only a smaller epsilon can be tested.")


def _above_no_noise_note(data: RunData, alg: str) -> str:
    """Why a private arm ends with a higher test accuracy than its noise-free run (one sentence)."""
    final = final_metrics(data)
    get = lambda key, prefix="": final.get(f"{prefix}{alg}.{key}")
    accuracy, reference = get("test_accuracy"), get("test_accuracy", f"{BASELINE}.")
    if accuracy is None or reference is None or accuracy <= reference:
        return ""
    loss, reference_loss = get("test_loss"), get("test_loss", f"{BASELINE}.")
    steps, stop = get("planned_steps"), get("stop_step")
    same = (f"both take the same {steps} steps at the same step size from the same start"
            if stop is None or stop == steps else
            f"the private run stopped at step {stop} of {steps} (its budget), the noise-free one ran all")
    if loss is not None and reference_loss is not None and loss >= reference_loss:
        why = (f"while its test loss is worse ({loss:.3g} vs {reference_loss:.3g}): {same}, so one draw of "
               "the noise moved a few test points across the decision boundary, which accuracy counts and the "
               "loss hardly weighs; it is one seed, not privacy improving the model")
    else:
        why = (f"and in test loss ({loss:.3g} vs {reference_loss:.3g}): {same}; the noise-free run has not "
               "converged at this step size, and on one seed one draw of the noise can land nearer the "
               "optimum; read a gain only from several seeds")
    return f"{LABELS[alg]} ends above its no-noise run in test accuracy ({accuracy:.3f} vs {reference:.3f}) {why}."


def _decimals(low: float, high: float) -> str:
    """``low-high`` with four significant digits of ``high`` and as many decimals for both (7.978-8.000)."""
    places = max(0, 3 - int(np.floor(np.log10(abs(high))))) if high else 3
    return f"{low:.{places}f}-{high:.{places}f}"


class BudgetSection(ReportSection):
    """Sigma, target, planned and actual steps, and the pair that stopped the run."""

    title = "Privacy budget"

    def render(self, data: RunData, out_dir: Path) -> str:
        final, privacy = final_metrics(data), (data.config.get("decentralized") or {}).get("privacy", {})
        if not trained_algorithms(data):
            return "<p>No algorithm was trained (accounting only, or the run has not finished).</p>"
        rows = []
        for alg in trained_algorithms(data):
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
    """The final (epsilon, delta) of every ordered pair u -> v; a matrix whose pairs spread over less
    than 1% is one line of text instead (a map of one colour says nothing, and a map stretched over a
    sliver of range draws a 0.3% spread at full contrast)."""

    title = "Pairwise epsilon"

    def render(self, data: RunData, out_dir: Path) -> str:
        figures, constant, narrow = [], [], []
        for alg in trained_algorithms(data):
            eps = np.array(data.artifacts[f"{alg}.pairwise_epsilon"], dtype=np.float64)
            np.fill_diagonal(eps, np.nan)  # u = v is no pair: left blank, out of the colour range
            pairs = eps[np.isfinite(eps)]
            if pairs.size and np.ptp(pairs) <= 1e-9 * max(abs(pairs.max()), 1.0):
                constant.append(f"{LABELS[alg]}: every pair u -> v at epsilon {pairs.max():.4g}")
                continue
            if _narrow(pairs):
                narrow.append(f"{LABELS[alg]}: every pair u -> v spends {_decimals(pairs.min(), pairs.max())}")
                continue
            path = plot_heatmap(out_dir / f"pairwise-{alg}.png", eps, "u (data owner)", "v (observer)",
                                title=f"{LABELS[alg]}: epsilon u -> v", value_label=_epsilon_label(data),
                                cells="pairs")
            figures.append(image(path.name, f"{alg} pairwise epsilon"))
        parts = [f"<p>{html.escape('; '.join(constant))} (no heatmap: one value).</p>"] if constant else []
        if narrow:
            parts.append(f"<p>{html.escape('; '.join(narrow))} (no heatmap: a spread under {NARROW:.0%} of "
                         "the largest, which a colour map would draw as large differences).</p>")
        if figures:
            parts.append('<div class="grid">' + "".join(figures) + "</div>")
        return "".join(parts) or "<p>No pairwise matrix.</p>"


class DistanceSection(ReportSection):
    """Epsilon by shortest-path distance: the trained algorithms at their own (calibrated) noise,
    beside the Fig. 1 comparison at one noise for all."""

    title = "Epsilon against shortest-path distance"

    def render(self, data: RunData, out_dir: Path) -> str:
        figures, notes = [], []
        trained = trained_algorithms(data)
        flat = _flat_distance_note(data, trained) if trained else ""
        if flat:
            notes.append(flat)
        elif trained:
            figures.append(_trained_distance_figure(data, trained, out_dir / "distance-trained.png"))
            notes.append(_run_note(data, trained))
        compared, rows = _comparison_figures(data, out_dir)
        if rows:
            notes.append(_comparison_note(data))
        if not figures + compared:
            return "".join(notes) or "<p>Nothing to show.</p>"
        body = "".join(notes) + '<div class="grid">' + "".join(figures + compared) + "</div>"
        if rows:
            body += table(rows, ("topology", "n", "spectral gap", "walk steps T", "gossip rounds",
                                 "distances where random walk < gossip", "gossip at or below from distance"))
        return body + "<p>Curves that coincide are drawn once, their names joined by =.</p>"


def _flat_distance_note(data: RunData, trained: list[str]) -> str:
    """The sentence that replaces the run's epsilon-by-distance chart when every trained curve lies
    within 1% (empty otherwise): flat curves on an axis from 0 carry nothing a range does not."""
    values = np.concatenate([data.artifacts[f"{a}.distance_mean"] for a in trained])
    if not _narrow(values):
        return ""
    why = ("each algorithm's noise is calibrated so that its worst pair ends at the target, and on this "
           "graph the farther pairs end within 1% of it too, so the chart would be flat by construction"
           if _calibrated(data, trained) else "at this noise the distance changes the bound by under 1%")
    compared = any(key.startswith("comparison.") for key in data.artifacts)
    return (f"<p>This run: every trained algorithm's pairs end within {_decimals(values.min(), values.max())} "
            f"at every distance; {why}. No chart of it"
            + (": the comparison at equal noise below is the one that tells the algorithms apart" if compared else "")
            + ".</p>")


def _run_note(data: RunData, trained: list[str]) -> str:
    """Why the run's curves are not the algorithms' comparison: each has its own noise."""
    sigmas = ", ".join(f"{LABELS[a]} {final_metrics(data).get(f'{a}.sigma', float('nan')):.4g}" for a in trained)
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
    return all(final_metrics(data).get(f"{a}.sigma_calibrated") for a in trained)


def _trained_distance_figure(data: RunData, trained: list[str], path: Path) -> str:
    """The run's epsilon by distance on an axis from 0, with the target: a spread of a hundredth
    on an axis fit to the data would look like a cliff."""
    arrays, target = data.artifacts, privacy_block(data).get("target_epsilon")
    values = np.concatenate([arrays[f"{a}.distance_mean"] for a in trained])
    title = "this run: final epsilon, " + ("calibrated noise" if _calibrated(data, trained) else "the noise set")

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


class TrainingSection(ReportSection):
    """Test loss, test accuracy and epsilon of every arm over training, one chart each with the arms
    overlaid (private solid, noise-free dashed). The x axis is data passes, gradients per node: a walk
    step takes one node's gradient (1/n of a pass), a gossip or local-DP iteration one on every node
    (one pass), so a walk step and a gossip iteration are not one unit of "step"."""

    title = "Training, in data passes"

    def render(self, data: RunData, out_dir: Path) -> str:
        nodes = int((data.config.get("data") or {}).get("num_clients") or 1)
        names = {"test_loss": "test loss (cross-entropy, nats)", "test_accuracy": "test accuracy (fraction correct)",
                 "epsilon": f"largest pairwise {_epsilon_label(data)}"}
        figures = []
        for metric, label in names.items():
            lines = _passes(data.metrics, metric, nodes)
            if lines:
                figures.append(_figure(out_dir / f"training-{metric}.png",
                                       lambda ax, found=lines: _draw_passes(ax, found), label.split(" (")[0],
                                       f"data passes (gradients per node; a walk step is 1/{nodes})", label))
        if not figures:
            return ""
        return ("<p>Every arm on one chart per measure; dashed: the same algorithm with no noise. Train losses are "
                'in the final values.</p><div class="grid">' + "".join(figures) + "</div>")


def _passes(records: list[dict], metric: str, nodes: int) -> dict[str, tuple[list[float], list[float]]]:
    """{phase: (data passes, values)} of ``metric`` for every phase (algorithm or noise-free arm)."""
    lines: dict[str, tuple[list[float], list[float]]] = {}
    for record in records:
        phase = str(record.get("algorithm", ""))
        value = record.get(f"{phase}.{metric}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            per_pass = nodes if phase.rsplit(".", 1)[-1] == "random_walk" else 1
            xs, ys = lines.setdefault(phase, ([], []))
            xs.append(record["step"] / per_pass)
            ys.append(float(value))
    return lines


def _draw_passes(ax, lines: dict[str, tuple[list[float], list[float]]]) -> None:
    for phase, (xs, ys) in lines.items():
        alg = phase.rsplit(".", 1)[-1]
        private = not phase.startswith(f"{BASELINE}.")
        ax.plot(xs, ys, color=COLORS[alg], linestyle="-" if private else "--", marker=MARKERS[alg] if private else None,
                markersize=3, linewidth=1.5 if private else 1, label=LABELS[alg] + ("" if private else ", no noise"))


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
        final = final_metrics(data)
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
    most the audit could show (its power); one table row per algorithm and verdict, with its count
    of pairs and the range of its bounds."""

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
            power = algorithm_power(data, alg)
            pairs = pair_audits(data, alg, power)
            rows += _verdict_rows(alg, pairs, power)
            tallies.append(_tally(alg, pairs))
            figures.append(_figure(out_dir / f"audit-{alg}.png", lambda ax, g=get, p=power: _audit_plot(ax, g, p),
                                   f"{LABELS[alg]}: pairs ({config.get('source')}, v)",
                                   f"shortest-path distance from node {config.get('source')} (hops)",
                                   _epsilon_label(data)))
        return (_audit_head(config, canaries, significance) + "<ul>" + "".join(tallies) + "</ul>"
                + table(rows, ("algorithm", "verdict", "pairs", "observers v", "distance (hops)",
                               "empirical lower bound", "accountant upper bound", "at most detectable (power)"))
                + '<div class="grid">' + "".join(figures) + "</div>")


def _verdict_rows(alg: str, pairs: list[PairAudit], power: float) -> list[tuple]:
    """One row per verdict of ``alg``: the verdict, how many pairs, which, and the range of each bound."""
    rows = []
    for kind in (VIOLATION, TOO_WEAK, CONSISTENT):
        group = [p for p in pairs if p.kind == kind]
        if group:
            rows.append((LABELS[alg], _verdict_text(kind, group, power), len(group),
                         ", ".join(str(p.observer) for p in group), _span([p.distance for p in group], "d"),
                         _span([p.lower for p in group]), _span([p.upper for p in group]), power))
    return rows


def _verdict_text(kind: str, group: list[PairAudit], power: float) -> str:
    if kind == VIOLATION:
        return "VIOLATION (accountant wrong)"
    if kind == TOO_WEAK:
        return f"audit too weak to test the bound (it can show at most {power:.3g})"
    ratios = [p.lower / p.upper for p in group if p.upper > 0]
    if not ratios:
        return "consistent (upper bound 0)"
    return f"consistent: tightness lower/upper = {_span(ratios, '.2f')}"


def _span(values: list, digits: str = ".4g") -> str:
    """``a`` or ``a-b``: the range of a group's values."""
    low, high = min(values), max(values)
    return f"{low:{digits}}" if format(low, digits) == format(high, digits) else f"{low:{digits}}-{high:{digits}}"


def _audit_head(config: dict, canaries: int, significance: float) -> str:
    """What the audit did, how sure its bounds are, and what its power means."""
    return (f"<p>{canaries} canaries at node {config.get('source')}, each included with probability 1/2; "
            f"every other node v guesses from its own view. Each lower bound holds with confidence "
            f"{1 - significance:.0%} (significance {significance:g}, Bonferroni-corrected over the "
            f"{len(guess_counts(canaries))} guess counts tried). Audit power: the largest lower bound these "
            "canaries let even a perfect attacker certify; an accountant's epsilon above it cannot be "
            "tested by this audit, so a low lower bound there says nothing about the accountant.</p>")


def _tally(alg: str, pairs: list[PairAudit]) -> str:
    """One line per algorithm: how many pairs fall under each kind of verdict."""
    counts = ", ".join(f"{count} {kind}" for kind in (VIOLATION, TOO_WEAK, CONSISTENT)
                       if (count := sum(p.kind == kind for p in pairs)))
    return f"<li>{LABELS[alg]}: {len(pairs)} pairs: {counts}</li>"


def _audit_plot(ax, get, power: float) -> None:
    ax.scatter(get("distance"), get("upper"), marker="^", label="accountant (upper)")
    ax.scatter(get("distance"), get("lower"), marker="v", label="audit (lower)")
    ax.axhline(power, color="black", linestyle="--", linewidth=1, label=f"audit power (at most {power:.3g})")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# The privacy report's own sections, right below the summary: the answer first, then the evidence.
LAYOUT = ReportLayout(after_summary=(AnswerSection(), HeatmapSection(), BudgetSection(), AuditSection(),
                                     TrainingSection(), UtilitySection(), DistanceSection()),
                      covered=frozenset(f"{prefix}{alg}.{metric}" for prefix in ("", f"{BASELINE}.")
                                        for alg in ALGORITHMS for metric in CHARTED))
