"""How a sweep names the values of the keys it varies, in its variants' folder names
(`testbed.sweep.variant_slug`) and in its comparison report's labels (`testbed.report.sweep`)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any


def axis_labels(values: list[Any]) -> list[str]:
    """How a grid axis names its values in folder names: a mapping by its ``name``, and where two
    share a name (SDEA with the code and the two-group rule; LIE under two threat models) by the
    name and the keys that tell them apart, e.g. ``sdea+rule=two_group``.

    Linear in the values: only those that share a name are compared, through counts of each
    key's values among them (a sweep of 50,000 seeds was quadratic)."""
    short = [short_value(value) for value in values]
    groups: dict[str, list[Any]] = defaultdict(list)
    for value, label in zip(values, short):
        groups[label].append(value)
    counts = {label: _key_counts(group) for label, group in groups.items() if len(group) > 1}
    copies = Counter(id(value) for value in values)  # a value and its YAML aliases are one object
    labels = []
    for value, label in zip(values, short):
        group = groups[label]
        same = copies[id(value)]  # itself and its aliases, which are no twins of it
        if isinstance(value, dict) and len(group) > same:
            # A key tells it apart unless every twin (another value of its name) is a mapping with an equal value.
            differing = sorted(k for k in value if k != "name"
                               and counts[label][k, _frozen(value[k])] - same < len(group) - same)
            label += "".join(f"+{k}={short_value(value[k])}" for k in differing)
        labels.append(label)
    return labels


def _key_counts(group: list[Any]) -> Counter:
    """How many mappings of ``group`` have each (key, value), a missing key counting as None (as
    ``dict.get`` reads it), over every key any of them has."""
    mappings = [value for value in group if isinstance(value, dict)]
    keys = {key for value in mappings for key in value}
    return Counter((key, _frozen(value.get(key))) for value in mappings for key in keys)


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a YAML value that is equal where the values are equal (1 and 1.0 too)."""
    if isinstance(value, dict):
        return ("mapping", frozenset((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_frozen(v) for v in value))
    if isinstance(value, set):
        return frozenset(_frozen(v) for v in value)
    return value


def short_value(value: Any) -> str:
    """A value as a folder name shows it: a mapping by its ``name``."""
    if isinstance(value, dict):
        return value.get("name", json.dumps(value, sort_keys=True))
    return str(value)
