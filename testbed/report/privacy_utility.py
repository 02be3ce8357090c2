"""A DP sweep's privacy-utility chart: accuracy against the epsilon each setting spent.

A sweep over ``federated.privacy.noise_multiplier`` (or anything else that changes what a federated
DP run spends) answers "what does each epsilon cost in accuracy": one point per setting at the
accountant's final epsilon and the test accuracy averaged over its seeds, the audit's empirical
lower bound beside it where the runs audited (the same accuracy at the epsilon the audit could
show: the gap between the two is how much of the accountant's bound the audit confirmed), and the
accuracy without privacy as a horizontal line (variants without a privacy block, or each run's
``baselines: [no_privacy]`` arm).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import plot_curve
from testbed.report.sections import image, table

LOWER_BOUND = "privacy.audit.epsilon_lower_bound"
NO_PRIVACY = "baselines.no_privacy.test_accuracy"


def _last(records: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in records if "round" in r and key in r]
    return float(values[-1]) if values else None


def _setting(variant: dict[str, Any]) -> str:
    """What the variant's privacy block says apart from the seed: its group on the chart."""
    block = ((variant.get("config") or {}).get("federated") or {}).get("privacy") or {}
    return f"z = {block.get('noise_multiplier')}, C = {block.get('clipping_norm')}"


def privacy_utility(variants: dict[str, dict[str, Any]], out_dir: Path) -> str:
    """The chart and its table, or "" for a sweep with fewer than two private settings."""
    points: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    plain: list[float] = []
    for variant in variants.values():
        accuracy = _last(variant["metrics"], "test_accuracy")
        if accuracy is None:
            continue
        epsilon = _last(variant["metrics"], "epsilon")
        if epsilon is None:
            plain.append(accuracy)
            continue
        point = points[_setting(variant)]
        point["epsilon"].append(epsilon)
        point["accuracy"].append(accuracy)
        bound = _last(variant["metrics"], LOWER_BOUND)
        if bound is not None:
            point["bound"].append(bound)
        baseline = ((variant.get("summary") or {}).get("final_metrics") or {}).get(NO_PRIVACY)
        if baseline is not None:
            plain.append(float(baseline))
    if len(points) < 2:
        return ""
    settings = sorted(points, key=lambda name: float(np.mean(points[name]["epsilon"])))
    epsilons = [float(np.mean(points[name]["epsilon"])) for name in settings]
    accuracies = [float(np.mean(points[name]["accuracy"])) for name in settings]
    bounds = [float(np.mean(points[name]["bound"])) if points[name]["bound"] else None for name in settings]
    lines = {"accountant's epsilon": (epsilons, accuracies)}
    if all(bound is not None for bound in bounds):
        lines["audit's lower bound"] = ([float(b or 0.0) for b in bounds], accuracies)
    if plain:
        lines[f"no privacy ({np.mean(plain):.3f})"] = ([0.0, max(epsilons)], [float(np.mean(plain))] * 2)
    rows = [(name, epsilon, accuracy, "not audited" if bound is None else bound, len(points[name]["accuracy"]))
            for name, epsilon, accuracy, bound in zip(settings, epsilons, accuracies, bounds)]
    plot_curve(out_dir / "privacy-utility.png", "test accuracy against epsilon", "epsilon", lines,
               ylabel="test accuracy (mean over seeds)")
    header = ("setting", "accountant's epsilon", "test accuracy (mean)", "audit's lower bound", "seeds")
    return table(rows, header) + image("privacy-utility.png", "test accuracy against epsilon, per setting")
