"""``testbed compare RUN_DIR...``: runs side by side on one page, with paired intervals where seeds are shared.

Any run folders, and sweep folders (each contributes its completed variants), of one kind. The
page, in the reports' look, leads with the compared metric's curves (one colour per run) and the
paired differences; then the final metrics side by side, the scenario keys that differ between
the runs, and the loss curves::

    testbed compare runs/sdea-* runs/fedavg-sweep --metric test_accuracy --out runs/sdea-vs-fedavg

Runs that differ only in their seed (and name) form one arm. Each other arm is paired with the first arm
named on the command line over the seeds both ran (arm minus reference, per seed), and the mean
of those margins gets Student's t interval (`testbed.claims.statistics`, as the claims verdicts).
``compare.json`` beside the page holds the same numbers.
"""

from __future__ import annotations

import html
import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.claims.statistics import Interval, paired_interval
from testbed.errors import UserError
from testbed.report.plots import numeric_series, plot_curve, x_axis
from testbed.report.render import publish_page
from testbed.report.sections import image, table
from testbed.run import RunFolder

LEVEL = 0.95
DEFAULT_METRICS = ("test_accuracy", "accuracy", "test_loss", "loss")  # the first all runs report
LOSS_METRICS = ("test_loss", "loss", "train_loss")
NOT_COMPARED = ("sweep", "claims", "description")  # how a run was made or described, not what it ran
NOT_AN_ARM = ("seed", "name")  # a sweep names each variant apart: the name is no setting
MARKER = "compare.json"  # a folder holding it is a compare page, which --out may replace


@dataclass(frozen=True)
class ComparedRun:
    """One run on the page: its label, resolved config (flattened), final metrics and records."""

    label: str
    path: Path
    config: dict[str, Any]
    final: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def seed(self) -> Any:
        return self.config.get("seed")


def compare_runs(paths: Sequence[Path], metric: str | None, out: Path) -> Path:
    """Write the comparison page of the runs in ``paths`` into ``out``; returns its index.html."""
    runs = load_runs(paths)
    metric = _metric(runs, metric)
    differing = differing_keys(runs)
    arms = group_arms(runs, [k for k in differing if k not in NOT_AN_ARM])
    pairs = paired_differences(arms, metric)
    _check_out(out)
    page = RunFolder(out.parent)
    page.report_dir = out  # publish_page writes report_dir whole, through a staging folder beside it
    title = f"comparison of {len(runs)} {runs[0].config['kind']} runs: {metric}"
    result = publish_page(page, title, lambda folder: _body(runs, metric, differing, arms, pairs, folder))
    (out / MARKER).write_text(json.dumps(_summary(runs, metric, arms, pairs), indent=2) + "\n")
    return result


# --- the runs ------------------------------------------------------------------------------------


def load_runs(paths: Sequence[Path]) -> list[ComparedRun]:
    """The runs of the folders, sweeps expanded; refuses a folder that is not a run, an incomplete
    run, fewer than two runs, and runs of different kinds, each in one line."""
    runs = [run for path in paths for run in _runs_of(Path(path))]
    if len(runs) < 2:
        raise UserError(f"{' '.join(map(str, paths))}: {len(runs)} completed run(s); compare needs two or more")
    first = runs[0]
    for run in runs[1:]:
        if run.config.get("kind") != first.config.get("kind"):
            raise UserError(f"{run.path}: a {run.config.get('kind')} run, but {first.path} is a "
                            f"{first.config.get('kind')} run; compare runs of one kind")
    return runs


def _runs_of(path: Path) -> list[ComparedRun]:
    if not path.is_dir() or not (path / "config.yaml").is_file():
        raise UserError(f"{path}: not a run folder (no config.yaml); give run or sweep folders")
    folder = RunFolder(path)
    config = folder.read_config()
    if not config.get("sweep"):
        return [_load(folder, path.name)]
    variants = sorted(p for p in (path / "variants").glob("*") if p.is_dir() and RunFolder(p).completed)
    if not variants:
        raise UserError(f"{path}: a sweep with no completed variant; 'testbed resume {path}' runs them")
    return [_load(RunFolder(v), f"{path.name}/{v.name}") for v in variants]


def _load(folder: RunFolder, label: str) -> ComparedRun:
    summary = folder.read_summary()
    if summary is None:
        raise UserError(f"{folder.path}: the run has not completed; 'testbed resume {folder.path}' finishes it")
    config = {k: v for k, v in _flatten(folder.read_config()).items() if k.split(".")[0] not in NOT_COMPARED}
    return ComparedRun(label, folder.path, config, summary.get("final_metrics") or {}, folder.read_metrics())


def _flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict) and config:
        return {k: v for key, value in config.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): config}


def _metric(runs: list[ComparedRun], chosen: str | None) -> str:
    shared = sorted(set.intersection(*(set(k for k, v in r.final.items() if _number(v)) for r in runs)))
    if chosen is not None:
        if chosen not in shared:
            raise UserError(f"--metric: '{chosen}' is not a final metric of every run; shared: "
                            f"{', '.join(shared) or 'none'}")
        return chosen
    for name in DEFAULT_METRICS:
        if name in shared:
            return name
    if not shared:
        raise UserError(f"{runs[0].path}: the runs share no numeric final metric to compare")
    return shared[0]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def differing_keys(runs: list[ComparedRun]) -> list[str]:
    """The dotted config keys whose values are not the same in every run (a key absent counts)."""
    keys = sorted({k for r in runs for k in r.config})
    return [k for k in keys if len({json.dumps(r.config.get(k), sort_keys=True) for r in runs}) > 1]


# --- arms and their paired differences --------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """The runs that differ only in their seed: one setting."""

    label: str
    runs: tuple[ComparedRun, ...]

    def by_seed(self, metric: str) -> dict[Any, float]:
        return {r.seed: float(r.final[metric]) for r in self.runs}


@dataclass(frozen=True)
class Pair:
    """An arm against the reference arm over their shared seeds."""

    arm: str
    reference: str
    seeds: tuple[Any, ...]
    interval: Interval | None


def group_arms(runs: list[ComparedRun], keys: list[str]) -> list[Arm]:
    """Runs grouped by their values of ``keys`` (the differing keys but seed and name), in first-seen order."""
    groups: dict[str, list[ComparedRun]] = {}
    for run in runs:
        label = ", ".join(f"{k}={_text(run.config.get(k))}" for k in keys) or "all runs"
        groups.setdefault(label, []).append(run)
    return [Arm(label, tuple(members)) for label, members in groups.items()]


def paired_differences(arms: list[Arm], metric: str) -> list[Pair]:
    """Each arm after the first minus the first, paired by seed (none where no seed is shared)."""
    if len(arms) < 2:
        return []
    reference = arms[0].by_seed(metric)
    pairs = []
    for arm in arms[1:]:
        values = arm.by_seed(metric)
        seeds = tuple(s for s in values if s in reference)
        margins = [values[s] - reference[s] for s in seeds]
        pairs.append(Pair(arm.label, arms[0].label, seeds, paired_interval(margins, LEVEL, "t") if seeds else None))
    return pairs


# --- the page ------------------------------------------------------------------------------------


def _body(runs: list[ComparedRun], metric: str, differing: list[str], arms: list[Arm], pairs: list[Pair],
          folder: Path) -> str:
    losses = [m for m in LOSS_METRICS if m != metric and all(any(m in r for r in run.records) for run in runs)][:1]
    charts = [c for c in (_curves(runs, name, folder) for name in (metric, *losses)) if c]
    return "".join([
        f'<p class="runline">{len(runs)} runs in {len(arms)} arm(s) · metric {html.escape(metric)} · '
        f"paired differences against <b>{html.escape(arms[0].label)}</b>, {LEVEL:.0%} t interval</p>",
        _section("Curves (one colour per run)", f'<div class="grid">{"".join(charts)}</div>' if charts else ""),
        _section(f"Paired differences in {metric} (shared seeds)", _pairs_table(pairs)),
        _section("Final metrics side by side", _finals_table(runs)),
        _section("Scenario differences (only the keys that differ)", _differences_table(runs, differing)),
    ])


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>" if body else ""


def _curves(runs: list[ComparedRun], metric: str, folder: Path) -> str:
    lines = {}
    for run in runs:
        xs, ys = numeric_series(run.records).get(metric, ([], []))
        if xs:
            lines[run.label] = (xs, ys)
    if not lines:
        return ""
    axis = x_axis(runs[0].records)
    path = plot_curve(folder / f"compare-{metric}.png", metric, axis, lines, distinct=True)
    return image(path.name, f"{metric} of each run over {axis}s")


def _pairs_table(pairs: list[Pair]) -> str:
    rows: list[tuple[Any, ...]] = []
    for pair in pairs:
        found = pair.interval
        if found is None:
            rows.append((pair.arm, pair.reference, len(pair.seeds), "-", "-", "-", "no shared seeds" if not pair.seeds
                         else "one shared seed: no interval"))
        else:
            rows.append((pair.arm, pair.reference, found.n, found.mean, f"[{found.low:.4g}, {found.high:.4g}]",
                         found.p, _reading(found)))
    return table(rows, ("arm", "minus", "seeds", "mean difference", f"{LEVEL:.0%} interval", "p", "reading"))


def _reading(found: Interval) -> str:
    return {"reproduced": "above zero", "not reproduced": "below zero"}.get(found.verdict(), "covers zero: a tie")


def _finals_table(runs: list[ComparedRun]) -> str:
    metrics = sorted({k for r in runs for k, v in r.final.items() if _number(v)})
    rows = [(m, *[r.final.get(m, "-") for r in runs]) for m in metrics]
    return table(rows, ("metric", *[r.label for r in runs]))


def _differences_table(runs: list[ComparedRun], differing: list[str]) -> str:
    if not differing:
        return "<p>The runs' scenarios are the same.</p>"
    return table([(r.label, *[_text(r.config.get(k, "(absent)")) for k in differing]) for r in runs],
                 ("run", *differing))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _summary(runs: list[ComparedRun], metric: str, arms: list[Arm], pairs: list[Pair]) -> dict[str, Any]:
    return {
        "metric": metric, "runs": {r.label: str(r.path) for r in runs},
        "arms": {a.label: [r.label for r in a.runs] for a in arms},
        "paired": [{"arm": p.arm, "minus": p.reference, "seeds": list(p.seeds),
                    "interval": None if p.interval is None else vars(p.interval)} for p in pairs],
    }


def _check_out(out: Path) -> None:
    """``out`` is replaced whole: refuse a folder that is not an earlier comparison page."""
    if out.exists() and not (out / MARKER).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out: {out}: exists and is not a comparison page; name a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_dir() and not any(out.iterdir()):
        shutil.rmtree(out)
