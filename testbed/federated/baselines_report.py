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

from testbed.federated.baselines import BASELINES_DIR, NO_ATTACK, NO_PRIVACY
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, chance_accuracy, image, table
from testbed.run import RunFolder

METRIC = "test_accuracy"
BACKDOOR = "attack_success_rate"


def _curve(records: list[dict[str, Any]], key: str = METRIC) -> tuple[list[float], list[float]]:
    rounds = [r for r in records if "round" in r and key in r]
    return [float(r["round"]) for r in rounds], [float(r[key]) for r in rounds]


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
    if name == NO_PRIVACY:
        return f"{strategy}, no privacy"
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
        asr = {own: _curve(data.metrics, BACKDOOR)}  # a backdoor's attack success rate, per arm
        for name in names:
            records = RunFolder(data.path / BASELINES_DIR / name).read_metrics()
            xs, ys = _curve(records)
            if xs:
                lines[arm_label(data.config, name)] = (xs, ys)
                asr[arm_label(data.config, name)] = _curve(records, BACKDOOR)
        plot_curve(out_dir / "baselines-accuracy.png", "test accuracy per round", "round", lines,
                   ylabel="test accuracy (fraction correct)", chance=chance_accuracy(data))
        final = {label: ys[-1] if ys else math.nan for label, (_, ys) in lines.items()}
        rows: list[tuple[object, ...]] = [(label, value, value - final[own] if label != own else "")
                                          for label, value in final.items()]
        header: tuple[str, ...] = ("arm", "final test accuracy", "minus this run's")
        figures = image("baselines-accuracy.png", "test accuracy per round, strategy and baselines")
        if asr[own][0]:
            rows = [(*row, asr[str(row[0])][1][-1] if asr.get(str(row[0]), ((), ()))[1] else math.nan)
                    for row in rows]
            header += ("final attack success rate",)
            plot_curve(out_dir / "baselines-asr.png", "attack success rate per round", "round", asr,
                       ylabel="triggered test inputs sent to the target")
            figures += image("baselines-asr.png", "attack success rate per round, strategy and baselines")
        missing = [n for n in names if arm_label(data.config, n) not in lines]
        note = (f"<p>Not run yet: {', '.join(missing)} (<code>testbed resume</code> runs them).</p>"
                if missing else "")
        return table(rows, header) + note + figures
