"""The report's "Baselines" section: the strategy's accuracy curve beside its reference arms'.

Reads the run folders `testbed.federated.baselines` leaves under ``<run>/baselines/<name>/`` and
overlays their test accuracy on the scenario's own, round by round, with a table of final
accuracies and each arm's difference to the strategy (same seed, same clients: a paired
difference, of one seed; `testbed run` of a sweep over seeds gives the interval).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from testbed.federated.baselines import BASELINES_DIR, NO_ATTACK
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, image, table
from testbed.run import RunFolder

METRIC = "test_accuracy"


def _curve(records: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    rounds = [r for r in records if "round" in r and METRIC in r]
    return [float(r["round"]) for r in rounds], [float(r[METRIC]) for r in rounds]


def arm_label(config: dict[str, Any], name: str | None = None) -> str:
    """How an arm is named in the legend: the scenario's own (``name`` None) or a baseline's, by what
    it changes against the scenario."""
    federated = config.get("federated") or {}
    strategy = (federated.get("strategy") or {}).get("name", "?")
    attack = (federated.get("attack") or {}).get("name")
    if name is None:
        return f"{strategy}" + (f" under {attack}" if attack else "") + " (this run)"
    if name == NO_ATTACK:
        return f"{strategy}, no attack"
    return f"{name}" + (f" under {attack}" if attack else "")


class BaselinesSection(ReportSection):
    """Accuracy per round of the strategy and of each ``federated.baselines`` arm."""

    title = "Baselines"

    def render(self, data: RunData, out_dir: Path) -> str:
        names = list((data.config.get("federated") or {}).get("baselines") or [])
        if not names:
            return ""  # left out of the page
        own = arm_label(data.config)
        lines = {own: _curve(data.metrics)}
        for name in names:
            xs, ys = _curve(RunFolder(data.path / BASELINES_DIR / name).read_metrics())
            if xs:
                lines[arm_label(data.config, name)] = (xs, ys)
        plot_curve(out_dir / "baselines-accuracy.png", "test accuracy per round", "round", lines,
                   ylabel="test accuracy (fraction correct)")
        final = {label: ys[-1] if ys else math.nan for label, (_, ys) in lines.items()}
        rows = [(label, value, value - final[own] if label != own else "") for label, value in final.items()]
        missing = [n for n in names if arm_label(data.config, n) not in lines]
        note = (f"<p>Not run yet: {', '.join(missing)} (<code>testbed resume</code> runs them).</p>"
                if missing else "")
        return (table(rows, ("arm", "final test accuracy", "minus this run's")) + note
                + image("baselines-accuracy.png", "test accuracy per round, strategy and baselines"))
