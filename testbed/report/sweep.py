"""The comparison report of a sweep: every variant's outcome, means over seeds, and curves.

When the sweep varies a federated strategy and an attack, the report also pivots final accuracy
into the strategy x attack table that robustness papers print (mean and spread over seeds).
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import numeric_series, plot_curve, x_axis
from testbed.report.render import publish_page
from testbed.report.sections import image, table
from testbed.run import RunFolder

HEADLINE_METRICS = ("test_accuracy", "accuracy", "test_loss", "loss")
MAX_DEFAULT_METRICS = 8  # beyond this the tables stop being readable; name metrics in `sweep.metrics`


def mean_spread(values: list[float]) -> str:
    """``mean ± std`` (population std over seeds), or the single value."""
    if not values:
        return "-"
    return f"{np.mean(values):.4f} ± {np.std(values):.4f}" if len(values) > 1 else f"{values[0]:.4f}"


def render_sweep_report(sweep: RunFolder) -> Path:
    """Write ``report/index.html`` of a sweep folder; returns its path."""
    config, summary = sweep.read_config(), sweep.read_summary() or {"variants": {}}
    sweep_block = config.get("sweep") or {}
    varied = list(sweep_block.get("grid") or {})
    varied += [k for extra in sweep_block.get("variants") or [] for k in extra if k not in varied]
    variants = {slug: _load_variant(sweep.path / "variants" / slug, result)
                for slug, result in summary["variants"].items()}
    metrics = compared_metrics(variants, sweep_block.get("metrics") or [])
    body = lambda out_dir: "".join([
        _section("Claims (paired by seed)", _claims_table(sweep.path)),
        _section("Variants", _variants_table(variants, metrics)),
        _section("Pivot: strategy x attack", _pivot(variants, varied)),
        _section("Means over seeds", _group_table(variants, varied, metrics)),
        _section("Curves (mean over seeds)", _curves(variants, varied, metrics, out_dir)),
    ])
    return publish_page(sweep, f"{config.get('name', sweep.path.name)}: sweep of {len(variants)} variants", body)


def _load_variant(folder: Path, result: dict[str, Any]) -> dict[str, Any]:
    run = RunFolder(folder)
    variant_config = run.read_config() if run.config_path.is_file() else {}
    return {**result, "config": variant_config, "metrics": run.read_metrics()}


def _claims_table(folder: Path) -> str:
    """One row per group of each statement of the sweep's claims block (`testbed.claims.sweeps`)."""
    from testbed.claims.sweeps import read_sweep_claims

    rows = []
    for claim in read_sweep_claims(folder):
        for group in claim["groups"]:
            predicate, interval = group["predicate"] or {}, (group["predicate"] or {}).get("interval") or {}
            rows.append((claim["id"] + (f" ({group['group']})" if group["group"] else ""), predicate.get("text", ""),
                         predicate.get("left", float("nan")), predicate.get("right", float("nan")),
                         interval.get("mean", float("nan")), interval.get("low", float("nan")),
                         interval.get("high", float("nan")), len(group["seeds"]),
                         {True: "holds", False: "fails", None: "-"}[group["precondition_holds"]], group["verdict"]))
    header = ("claim", "predicate", "left", "right", "margin", "low", "high", "seeds", "precondition", "verdict")
    return table(rows, header) if rows else ""


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>" if body else ""


def compared_metrics(variants: dict[str, dict[str, Any]], chosen: list[str]) -> list[str]:
    """The final metrics the report compares: ``chosen`` if given, else the headline ones present,
    else every numeric final metric all completed variants share (a workload's own metrics)."""
    finals = [v.get("final_metrics", {}) for v in variants.values() if v["status"] == "completed"]
    if chosen:
        return list(chosen)
    present = [k for k in HEADLINE_METRICS if any(k in f for f in finals)]
    if present or not finals:
        return present
    shared = set.intersection(*(set(k for k, x in f.items() if isinstance(x, (int, float))) for f in finals))
    return sorted(shared)[:MAX_DEFAULT_METRICS]


def _variants_table(variants: dict[str, dict[str, Any]], metrics: list[str]) -> str:
    rows = [(slug, v["status"], *[v.get("final_metrics", {}).get(k, "-") for k in metrics], v.get("error", ""))
            for slug, v in sorted(variants.items())]
    return table(rows, ("variant", "status", *metrics, "error"))


def _value_at(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        return node.get("name", str(node))
    # A grid may vary a list-valued key; the value must be hashable to group variants by it.
    return str(node) if isinstance(node, list) else node


def _groups(variants: dict[str, dict[str, Any]], keys: list[str]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for variant in variants.values():
        if variant["status"] == "completed":
            groups[tuple(_value_at(variant["config"], k) for k in keys)].append(variant)
    return groups


def _group_table(variants: dict[str, dict[str, Any]], grid_keys: list[str], metrics: list[str]) -> str:
    keys = [k for k in grid_keys if k != "seed"]
    if not keys or "seed" not in grid_keys:
        return ""
    groups = _groups(variants, keys)
    rows = [(*group, len(members), *[mean_spread([v["final_metrics"][m] for v in members if m in v["final_metrics"]])
                                      for m in metrics]) for group, members in sorted(groups.items(), key=str)]
    return table(rows, (*keys, "seeds", *metrics))


def _pivot(variants: dict[str, dict[str, Any]], grid_keys: list[str]) -> str:
    strategy = next((k for k in grid_keys if "strategy" in k), None)
    attack = next((k for k in grid_keys if "attack" in k), None)
    if strategy is None or attack is None:
        return ""
    groups = _groups(variants, [strategy, attack])
    strategies = sorted({s for s, _ in groups}, key=str)
    attacks = sorted({a for _, a in groups}, key=str)
    accuracy = lambda s, a: [v["final_metrics"].get("test_accuracy", np.nan) for v in groups.get((s, a), [])]
    rows = []
    for s in strategies:
        means = [float(np.mean(accuracy(s, a))) for a in attacks if accuracy(s, a)]
        rows.append((s, *[mean_spread(accuracy(s, a)) for a in attacks], f"{np.mean(means):.4f}" if means else "-"))
    note = "<p>Final test accuracy, mean ± std over seeds; last column: mean over attacks.</p>"
    return note + table(rows, ("strategy", *map(str, attacks), "mean over attacks"))


def _curves(variants: dict[str, dict[str, Any]], grid_keys: list[str], metrics: list[str], out_dir: Path) -> str:
    keys = [k for k in grid_keys if k != "seed"] or grid_keys
    groups = _groups(variants, keys)
    lines: dict[str, tuple[list[float], list[float]]] = {}
    metric = None
    for group, members in sorted(groups.items(), key=str):
        curves = [numeric_series(v["metrics"]) for v in members]
        metric = metric or next((m for m in metrics if all(m in c for c in curves)), None)
        if metric is None or not all(metric in c for c in curves):
            continue
        length = min(len(c[metric][1]) for c in curves)
        xs = curves[0][metric][0][:length]
        lines[", ".join(map(str, group))] = (xs, list(np.mean([c[metric][1][:length] for c in curves], axis=0)))
    if not lines:
        return ""
    axis = x_axis(next(iter(variants.values()))["metrics"])
    plot_curve(out_dir / "sweep-curves.png", f"{metric} (mean over seeds)", axis, lines)
    return image("sweep-curves.png", f"{metric} per variant group")
