"""How a run's metric series become charts: constants folded into a table, sibling series overlaid.

A metric name reads as ``[arm.]split_measure[_k]``: ``train_loss`` and ``test_loss`` are the measure
``loss`` on two splits, ``random_walk.test_loss`` is the same measure of one arm of a comparison,
``test_distance_1`` and ``test_distance_64`` are members 1 and 64 of the family ``distance``.
Series of one measure share a chart (train beside test, each arm beside the others), so that a
reader compares them on one axis instead of across charts; a series that never changes is a
row of a table, not a flat line on an axis of noise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Split prefixes of a metric name, in the order their lines are drawn.
SPLITS = ("train", "val", "validation", "heldout", "test")
MAX_LINES = 6  # more lines than this on one chart stop being readable: they get charts of their own

# Units of measures, by the end of their name (the longest match wins).
UNITS = {
    "accuracy": "fraction correct",
    "ppl": "perplexity",
    "_s": "seconds",
    "seconds": "seconds",
    "epsilon": "epsilon",
    "weight": "aggregation weight",
    "auroc": "AUROC",
    "precision": "precision",
    "recall": "recall",
    "per_s": "per second",
    "per_s_per_process": "per second per process",
    "_mb": "MB",
    "kurtosis": "kurtosis",
}

Series = tuple[list[float], list[float]]


@dataclass
class Chart:
    """One chart: a measure and its lines (label -> series), drawn on one axis."""

    measure: str
    lines: dict[str, Series] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # the metric names behind the lines

    @property
    def ylabel(self) -> str:
        return axis_label(self.measure)

    @property
    def title(self) -> str:
        """The metric's own name for a single line; the measure where lines share the chart."""
        return (self.names[0] if len(self.names) == 1 else self.measure).replace("_", " ")


def split_name(name: str) -> tuple[str, str, str]:
    """``(arm, split, measure)`` of a metric name; arm and split empty where the name has none."""
    arm, _, last = name.rpartition(".")
    for split in SPLITS:
        if last.startswith(split + "_") and len(last) > len(split) + 1:
            return arm, split, last[len(split) + 1:]
    return arm, "", last


def family(measure: str) -> tuple[str, str]:
    """A measure with a numeric suffix (``distance_16``: the distance at 16 sampler steps) belongs
    to the family ``distance``, its line labelled ``16``; any other measure is its own family."""
    found = re.fullmatch(r"(.+?)_(\d+)", measure)
    return (found.group(1), found.group(2)) if found else (measure, "")


def axis_label(measure: str) -> str:
    """A y-axis label: the measure, with its unit where one is known and differs from the name."""
    endings = [end for end in UNITS if measure.endswith(end)]
    if not endings:
        return measure.replace("_", " ")
    unit = UNITS[max(endings, key=len)]
    name = measure.replace("_", " ")
    return name if unit == name else f"{name} ({unit})"


def is_constant(ys: list[float]) -> bool:
    """Every value the same (NaN-aware): nothing to plot."""
    return len({y for y in ys if not math.isnan(y)}) <= 1


def constants(series: Mapping[str, Series]) -> dict[str, float]:
    """The series recorded more than once that never change, with their value (one recorded once
    is a final value only: the report's final-values table has it)."""
    return {name: ys[-1] for name, (_, ys) in series.items() if len(ys) > 1 and is_constant(ys)}


def charts(series: Mapping[str, Series]) -> list[Chart]:
    """The changing series grouped by measure: one chart per measure with a line per (arm, split),
    or one chart per series where a measure has more than `MAX_LINES` of them."""
    grouped: dict[str, dict[str, tuple[str, Series]]] = {}
    for name, points in series.items():
        if is_constant(points[1]):
            continue
        arm, split, measure = split_name(name)
        measure, member = family(measure)
        label = " ".join(part for part in (arm, split, member) if part) or measure
        grouped.setdefault(measure, {})[label] = (name, points)
    result = []
    for measure, lines in sorted(grouped.items()):
        ordered = sorted(lines.items(), key=lambda item: _line_order(item[0]))
        if len(lines) > MAX_LINES:
            result += [Chart(measure, {label: points}, [name]) for label, (name, points) in ordered]
        else:
            result.append(Chart(measure, {label: points for label, (_, points) in ordered},
                                [name for _, (name, _) in ordered]))
    return result


def _line_order(label: str) -> tuple[int, int, str]:
    """Train first, test last, a family's members by their number, arms alphabetical."""
    words = label.split(" ")
    number = int(words.pop()) if words and words[-1].isdigit() else -1
    split = words[-1] if words else ""
    return (SPLITS.index(split) if split in SPLITS else len(SPLITS), number, label)
