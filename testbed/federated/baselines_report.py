"""The report's "Baselines" section: the strategy's accuracy curve beside its reference arms'.

Reads the run folders `testbed.federated.baselines` leaves under ``<run>/baselines/<name>/`` and
overlays their test accuracy on the scenario's own, round by round, with a table of final
accuracies and each arm's difference to the strategy (same seed, same clients: a paired
difference, of one seed; `testbed run` of a sweep over seeds gives the interval).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.federated.baselines import BASELINES_DIR, NO_ATTACK
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, image, table

METRIC = "test_accuracy"


def _curve(records: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    rounds = [r for r in records if "round" in r and METRIC in r]
    return [float(r["round"]) for r in rounds], [float(r[METRIC]) for r in rounds]


def _read_metrics(folder: Path) -> list[dict[str, Any]]:
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line torn by a crash; the baseline resumes from its checkpoint
    return records


def arm_label(config: dict[str, Any], name: str) -> str:
    """How an arm is named in the legend: what it changes against the scenario."""
    federated = config.get("federated") or {}
    strategy = (federated.get("strategy") or {}).get("name", "?")
    attack = (federated.get("attack") or {}).get("name")
    if name == NO_ATTACK:
        return f"{strategy}, no attack"
    return f"{name}" + (f" under {attack}" if attack else "")


class BaselinesSection(ReportSection):
    """Accuracy per round of the strategy and of each ``federated.baselines`` arm."""

    title = "Baselines"

    def render(self, data: RunData, out_dir: Path) -> str:
        names = list((data.config.get("federated") or {}).get("baselines") or [])
        if not names:
            return "<p>No baselines requested (<code>federated.baselines</code>).</p>"
        federated = data.config.get("federated") or {}
        own = f"{(federated.get('strategy') or {}).get('name', '?')}" + (
            f" under {(federated.get('attack') or {}).get('name')}" if federated.get("attack") else "")
        lines = {f"{own} (this run)": _curve(data.metrics)}
        for name in names:
            xs, ys = _curve(_read_metrics(data.path / BASELINES_DIR / name))
            if xs:
                lines[arm_label(data.config, name)] = (xs, ys)
        plot_curve(out_dir / "baselines-accuracy.png", "test accuracy per round", "round", lines)
        final = {label: ys[-1] if ys else math.nan for label, (_, ys) in lines.items()}
        mine = final[f"{own} (this run)"]
        rows = [(label, value, value - mine if label != f"{own} (this run)" else "") for label, value in final.items()]
        missing = [n for n in names if arm_label(data.config, n) not in lines]
        note = (f"<p>Not run yet: {', '.join(missing)} (<code>testbed resume</code> runs them).</p>"
                if missing else "")
        return (table(rows, ("arm", "final test accuracy", "minus this run's")) + note
                + image("baselines-accuracy.png", "test accuracy per round, strategy and baselines"))
