"""The comparison report of a sweep: every variant's outcome, means over seeds, and curves.

When the sweep varies a federated strategy and an attack, the report also pivots final accuracy
into the strategy x attack table that robustness papers print (mean and spread over seeds). A
federated sweep compares the robustness metrics the runs report beside accuracy; a spread is
shown only over two seeds or more. Each variant's name links to its own report.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from testbed.report.plots import numeric_series, plot_curve, x_axis
from testbed.report.privacy_utility import privacy_utility
from testbed.report.render import publish_page
from testbed.report.sections import image, table
from testbed.report.series import axis_label, is_constant
from testbed.run import RunFolder
from testbed.sweep_names import axis_labels
from testbed.sweep_status import HEADLINE_METRICS

# A federated sweep compares how robust each rule is, not only how accurate (where the runs report it).
ROBUSTNESS_METRICS = ("malicious_weight", "detection_precision", "detection_recall", "attacker_auroc", "honest_zeroed")
MAX_DEFAULT_METRICS = 8  # beyond this the tables stop being readable; name metrics in `sweep.metrics`


def mean_spread(values: list[float]) -> str:
    """``mean ± std`` (population std over seeds) from two seeds on; one seed's value says so."""
    if not values:
        return "-"
    return f"{np.mean(values):.4f} ± {np.std(values):.4f}" if len(values) > 1 else f"{values[0]:.4f} (1 seed)"


@dataclass(frozen=True)
class Grouping:
    """How the report names and groups variants: by the keys the sweep varies (the seed aside),
    each shown once under its short name, its values told apart as the folder names tell them."""

    keys: list[str]  # dotted, as the sweep names them
    names: list[str]  # short: the last dotted part (``attack`` for ``federated.attack.name``)
    of: dict[str, tuple[str, ...]]  # slug -> the labels of its values, one per key

    def label(self, group: tuple[str, ...], keys: list[str] | None = None) -> str:
        """``strategy=fedavg, attack=min_max`` (of ``keys`` only, if given)."""
        return ", ".join(f"{name}={value}" for key, name, value in zip(self.keys, self.names, group)
                         if keys is None or key in keys)


# Charts of the curves section: the sweep's first compared metrics that are recorded over training.
MAX_CURVE_CHARTS = 6


def render_sweep_report(sweep: RunFolder) -> Path:
    """Write ``report/index.html`` of a sweep folder; returns its path."""
    config, summary = sweep.read_config(), sweep.read_summary() or {"variants": {}}
    sweep_block = config.get("sweep") or {}
    varied = list(sweep_block.get("grid") or {})
    varied += [k for extra in sweep_block.get("variants") or [] for k in extra if k not in varied]
    variants = {slug: _load_variant(sweep.path / "variants" / slug, result)
                for slug, result in summary["variants"].items()}
    metrics = compared_metrics(variants, sweep_block.get("metrics") or [], config.get("kind"))
    grouping = group_variants(variants, varied)
    seeded = "seed" in varied
    body = lambda out_dir: "".join([
        # The answer first (verdicts, the comparison over seeds, its chart), every variant last.
        run_line(variants),
        _section("Claims (paired by seed)", _claims_table(sweep.path)),
        _section("Privacy and utility", privacy_utility(variants, out_dir)),
        _section("Pivot: strategy x attack", _pivot(variants, grouping)),
        _section("Means over seeds", _group_table(variants, grouping, metrics) if seeded else ""),
        _section("Curves (mean over seeds)", _curves(variants, grouping, metrics, out_dir)),
        _section("Variants", _variants_table(sweep.path, variants, metrics)),
    ])
    return publish_page(sweep, f"{config.get('name', sweep.path.name)}: sweep of {len(variants)} variants", body)


def _load_variant(folder: Path, result: dict[str, Any]) -> dict[str, Any]:
    run = RunFolder(folder)
    variant_config = run.read_config() if run.config_path.is_file() else {}
    return {**result, "config": variant_config, "metrics": run.read_metrics(), "summary": run.read_summary() or {}}


def run_line(variants: dict[str, dict[str, Any]]) -> str:
    """The sweep's line under its title, from its variants' summaries: how many completed, the
    commit(s) they ran at, their summed wall time and the engine."""
    summaries = [v.get("summary") or {} for v in variants.values()]
    done = sum(1 for s in summaries if s.get("status") == "completed")
    parts = [f"<b>{done} of {len(variants)} variants completed</b>"]
    commits = sorted({str(c) + (" (dirty)" if (s.get("source") or {}).get("dirty") else "")
                      for s in summaries if (c := (s.get("source") or {}).get("commit"))})
    if commits:
        parts.append(("commit " if len(commits) == 1 else "commits ") + html.escape(", ".join(commits)))
    walls = [float(w) for s in summaries if (w := (s.get("timings") or {}).get("wall_s")) is not None]
    if walls:
        parts.append(f"{sum(walls):.1f} s wall time summed over variants")
    engines = sorted({str(e) for s in summaries if (e := (s.get("engine") or {}).get("type"))})
    if engines:
        parts.append("engine " + html.escape(", ".join(engines)))
    return '<p class="runline">' + " · ".join(parts) + "</p>"


def _claims_table(folder: Path) -> str:
    """One row per group of each statement of the sweep's claims block (`testbed.claims.sweeps`)."""
    from testbed.claims.sweeps import read_sweep_claims

    rows = []
    for claim in read_sweep_claims(folder):
        for group in claim["groups"]:
            predicate, interval = group["predicate"] or {}, (group["predicate"] or {}).get("interval") or {}
            rows.append((claim["id"] + (f" ({group['group']})" if group["group"] else ""),
                         claim.get("type", "claim"), predicate.get("text", ""),
                         predicate.get("left", float("nan")), predicate.get("right", float("nan")),
                         interval.get("mean", float("nan")), interval.get("low", float("nan")),
                         interval.get("high", float("nan")), len(group["seeds"]),
                         {True: "holds", False: "fails", None: "-"}[group["precondition_holds"]], group["verdict"],
                         "; ".join(_detail(d) for d in group.get("secondary", []))))
    header = ("claim", "type", "predicate", "left", "right", "margin", "low", "high", "seeds", "precondition",
              "verdict", "secondary")
    return table(rows, header) if rows else ""


def _detail(secondary: dict[str, Any]) -> str:
    """``text: mean [low, high]`` of a statement's secondary value (claims.json)."""
    interval = secondary.get("interval")
    if interval is None:
        return f"{secondary['text']}: not measured"
    spread = "" if interval["method"] == "exact" else f" [{interval['low']:.4g}, {interval['high']:.4g}]"
    return f"{secondary['text']}: {interval['mean']:.4g}{spread}"


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>" if body else ""


def compared_metrics(variants: dict[str, dict[str, Any]], chosen: list[str], kind: str | None = None) -> list[str]:
    """The final metrics the report compares: ``chosen`` if given; for a federated sweep test
    accuracy and the robustness metrics the runs report; else the headline ones present, else
    every numeric final metric all completed variants share (a workload's own metrics)."""
    finals = [v.get("final_metrics", {}) for v in variants.values() if v["status"] == "completed"]
    if chosen:
        return list(chosen)
    if kind == "federated":
        return ["test_accuracy", *[k for k in ROBUSTNESS_METRICS if any(k in f for f in finals)]]
    present = [k for k in HEADLINE_METRICS if any(k in f for f in finals)]
    if present or not finals:
        return present
    shared = set.intersection(*(set(k for k, x in f.items() if isinstance(x, (int, float))) for f in finals))
    return sorted(shared)[:MAX_DEFAULT_METRICS]


def _variants_table(folder: Path, variants: dict[str, dict[str, Any]], metrics: list[str]) -> str:
    """One row per variant, its name linking to its own report where it has one."""
    rows = []
    for slug, v in sorted(variants.items()):
        report = folder / "variants" / slug / "report" / "index.html"
        href = f"../variants/{quote(slug, safe='=,+')}/report/index.html"
        name = f'<a href="{html.escape(href)}">{html.escape(slug)}</a>' if report.is_file() else html.escape(slug)
        cells = [v["status"], *[v.get("final_metrics", {}).get(k, "-") for k in metrics], v.get("error", "")]
        rows.append("<tr>" + f"<td>{name}</td>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("variant", "status", *metrics, "error"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)  # as `table` shows numbers


def _raw_at(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def group_variants(variants: dict[str, dict[str, Any]], varied: list[str]) -> Grouping:
    """The `Grouping` of the completed variants by the varied keys, the seed aside. A key under
    another varied key (``federated.strategy.name`` beside ``federated.strategy``) is part of
    that key's value, and a key whose labels match another's in every variant (or never change)
    says nothing more: both are left out, so that no label repeats a value."""
    done = {slug: v for slug, v in variants.items() if v["status"] == "completed"}
    keys = [k for k in varied if k != "seed" and not any(k.startswith(f"{other}.") for other in varied)]
    columns: dict[str, list[str]] = {}
    for key in keys:
        column = _value_labels([_raw_at(v["config"], key) for v in done.values()])
        if len(set(column)) > 1 and column not in columns.values():
            columns[key] = column
    kept = list(columns)
    of = {slug: tuple(columns[k][i] for k in kept) for i, slug in enumerate(done)}
    return Grouping(kept, _short_names(kept), of)


def _value_labels(values: list[Any]) -> list[str]:
    """Each value's label as the sweep's folder names give it (`axis_labels`): a mapping by its
    name, and by the keys that tell it apart from another of the same name."""
    distinct: dict[str, Any] = {}
    for value in values:
        distinct.setdefault(json.dumps(value, sort_keys=True, default=str), value)
    labels = dict(zip(distinct, axis_labels(list(distinct.values()))))
    return [labels[json.dumps(value, sort_keys=True, default=str)] for value in values]


def _short_names(keys: list[str]) -> list[str]:
    """The last dotted part of each key (the one before a final ``name``), more parts where two
    keys would share one."""
    parts = [k.split(".")[:-1] if k.endswith(".name") and "." in k else k.split(".") for k in keys]
    depth = [1] * len(keys)
    while True:
        names = [".".join(p[-d:]) for p, d in zip(parts, depth)]
        clashing = [i for i, n in enumerate(names) if names.count(n) > 1 and depth[i] < len(parts[i])]
        if not clashing:
            return names
        for i in clashing:
            depth[i] += 1


def _groups(variants: dict[str, dict[str, Any]], grouping: Grouping,
            keys: list[str] | None = None) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """The completed variants by their labels of ``keys`` (default: every key of ``grouping``)."""
    chosen = [i for i, k in enumerate(grouping.keys) if keys is None or k in keys]
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for slug, labels in grouping.of.items():
        groups[tuple(labels[i] for i in chosen)].append(variants[slug])
    return groups


def _spread_note(seeds_per_group: list[int], what: str) -> str:
    """Names the spread: ``mean ± std over N seeds``, or that one seed gives none."""
    sizes = sorted(set(seeds_per_group))
    if not sizes or sizes[-1] < 2:
        return f"<p>{html.escape(what)}: one seed per group, so no spread.</p>"
    seeds = f"{sizes[0]} seeds" if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]} seeds"
    return (f"<p>{html.escape(what)}: mean ± std (population) over {seeds}"
            + ("; a group of one seed shows its value, marked (1 seed)" if sizes[0] < 2 else "") + ".</p>")


def _group_table(variants: dict[str, dict[str, Any]], grouping: Grouping, metrics: list[str]) -> str:
    if not grouping.keys:
        return ""
    groups = _groups(variants, grouping)
    rows = [(*group, len(members), *[mean_spread([v["final_metrics"][m] for v in members if m in v["final_metrics"]])
                                      for m in metrics]) for group, members in sorted(groups.items())]
    note = _spread_note([len(m) for m in groups.values()], "Final metrics")
    return note + table(rows, (*grouping.names, "seeds", *metrics))


def _pivot(variants: dict[str, dict[str, Any]], grouping: Grouping) -> str:
    """Rows: the strategies; columns: the attacks (with whatever else the sweep varies)."""
    strategy = next((k for k in grouping.keys if "strategy" in k), None)
    if strategy is None or not any("attack" in k for k in grouping.keys):
        return ""
    others = [k for k in grouping.keys if k != strategy]
    position = grouping.keys.index(strategy)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for group, members in _groups(variants, grouping).items():
        rest = tuple(label for i, label in enumerate(group) if i != position)
        column = rest[0] if len(rest) == 1 else grouping.label(group, others)
        cells[group[position], column] += [v["final_metrics"].get("test_accuracy", np.nan) for v in members]
    strategies = sorted({s for s, _ in cells})
    columns = sorted({c for _, c in cells})
    rows = []
    for s in strategies:
        means = [float(np.mean(cells[s, c])) for c in columns if cells.get((s, c))]
        spreads = [mean_spread(cells.get((s, c), [])) for c in columns]
        rows.append((s, *spreads, f"{np.mean(means):.4f}" if means else "-"))
    note = _spread_note([len(v) for v in cells.values()], "Final test accuracy")
    note += "<p>Last column: the mean over the columns.</p>"
    return note + table(rows, (grouping.names[position], *columns, "mean over columns"))


def _curves(variants: dict[str, dict[str, Any]], grouping: Grouping, metrics: list[str], out_dir: Path) -> str:
    """One chart per compared metric that the variants record over training (the first
    `MAX_CURVE_CHARTS`), each group's mean over seeds a line."""
    series = {group: [numeric_series(v["metrics"]) for v in members]
              for group, members in sorted(_groups(variants, grouping).items())}
    charted = [m for m in metrics if any(all(m in c for c in curves) for curves in series.values())]
    if not charted:
        return ""
    axis = x_axis(next(iter(variants.values()))["metrics"])
    images: list[str] = []
    flat: list[str] = []
    for metric in charted[:MAX_CURVE_CHARTS]:
        lines: dict[str, tuple[list[float], list[float]]] = {}
        for group, curves in series.items():
            if not all(metric in c for c in curves):
                continue
            length = min(len(c[metric][1]) for c in curves)
            xs = curves[0][metric][0][:length]
            lines[grouping.label(group) or "all variants"] = (
                xs, list(np.mean([c[metric][1][:length] for c in curves], axis=0)))
        if all(is_constant(ys) for _, ys in lines.values()) and len({ys[0] for _, ys in lines.values()}) <= 1:
            flat.append(metric)  # every group the same constant: a sentence, not a chart of one line
            continue
        name = "sweep-curves.png" if not images else f"sweep-curves-{len(images)}.png"
        plot_curve(out_dir / name, f"{metric} (mean over seeds)", axis, lines, ylabel=axis_label(metric))
        images.append(image(name, f"{metric} per variant group"))
    note = (f"<p>The same constant in every variant group, over the whole run: {html.escape(', '.join(flat))}.</p>"
            if flat else "")
    return note + "".join(images)
