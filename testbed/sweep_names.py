"""How a sweep names the values of the keys it varies, in its variants' folder names
(`testbed.sweep.variant_slug`) and in its comparison report's labels (`testbed.report.sweep`)."""

from __future__ import annotations

import json
from typing import Any


def axis_labels(values: list[Any]) -> list[str]:
    """How a grid axis names its values in folder names: a mapping by its ``name``, and where two
    share a name (SDEA with the code and the two-group rule; LIE under two threat models) by the
    name and the keys that tell them apart, e.g. ``sdea+rule=two_group``."""
    short = [short_value(value) for value in values]
    labels = []
    for value, label in zip(values, short):
        twins = [other for other, name in zip(values, short) if name == label and other is not value]
        if isinstance(value, dict) and twins:
            differing = sorted(k for k in value if k != "name" and any(
                not isinstance(t, dict) or t.get(k) != value[k] for t in twins))
            label += "".join(f"+{k}={short_value(value[k])}" for k in differing)
        labels.append(label)
    return labels


def short_value(value: Any) -> str:
    """A value as a folder name shows it: a mapping by its ``name``."""
    if isinstance(value, dict):
        return value.get("name", json.dumps(value, sort_keys=True))
    return str(value)
