"""The tracker component: one class per experiment tracker, with its name, typed config and package.

A tracker mirrors the records of metrics.jsonl (``step`` or ``round`` is the x-axis, not a
metric); the run folder stays the source of truth. A third party's tracker is a `Tracker`
subclass declared in the ``testbed.trackers`` entry-point group (see `testbed.plugins`).
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from testbed.config import StrictModel
from testbed.provenance import source_commit

if TYPE_CHECKING:
    from testbed.run import RunFolder

AXES = ("step", "round")
# The config keys whose values name a run in a tracker's run list.
TAG_KEYS = {"kind": "kind", "scenario": "name", "seed": "seed", "strategy": "federated.strategy.name",
            "attack": "federated.attack.name", "workload": "workload.name"}
# Top-level keys of every kind; the blocks a kind reads are `testbed.scenario.KIND_BLOCKS`.
TOP_LEVEL = ("name", "kind", "description", "seed", "device")
NOT_A_PARAM = ("sweep", "claims")  # how variants are made, not what one run does
SWEEP_IDS = "trackers"  # the folder of a run (or sweep) that keeps its trackers' run ids, for resume


class NoSettings(StrictModel):
    """A tracker without settings of its own."""


class Tracker(ABC):
    """Receives every metrics record of a run; ``name``, ``Config`` and ``package`` declare it."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]] = NoSettings
    package: ClassVar[str]  # the module it needs; missing, `testbed validate` names ``extra``
    extra: ClassVar[str] = "trackers"

    def __init__(self, run: RunFolder, run_name: str, config: Any):
        self.run = run
        self.run_name = run_name
        self.config = config

    @classmethod
    def installed(cls) -> bool:
        return importlib.util.find_spec(cls.package) is not None

    @abstractmethod
    def log(self, record: dict[str, Any]) -> None:
        """Record one metrics record (its ``step`` or ``round`` is the x-axis)."""

    @abstractmethod
    def finish(self, final: dict[str, Any], report_dir: Path) -> None:
        """The run completed with ``final`` metrics and its report in ``report_dir``."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release (after `finish`, or on a failure without it)."""


def numeric(record: dict[str, Any]) -> dict[str, float]:
    """The record's numbers, without its x-axis and flags."""
    return {k: float(v) for k, v in record.items()
            if k not in AXES and isinstance(v, int | float) and not isinstance(v, bool)}


def step_of(record: dict[str, Any]) -> int:
    return int(record.get("step", record.get("round", 0)))


def flatten(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf value) of a nested config; lists are leaves."""
    if isinstance(config, dict) and config:
        for key, value in config.items():
            yield from flatten(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), config


def run_params(config: dict[str, Any]) -> dict[str, Any]:
    """The flattened config of the blocks the run's kind reads (not a federated run's empty
    ``decentralized`` defaults, nor the sweep that made it)."""
    from testbed.scenario import KIND_BLOCKS

    read = set(TOP_LEVEL) | set(KIND_BLOCKS.get(config.get("kind", ""), tuple(config))) - set(NOT_A_PARAM)
    return dict(flatten({k: v for k, v in config.items() if k in read}))


def run_tags(config: dict[str, Any]) -> dict[str, str]:
    """The tags that tell runs apart in a tracker: kind, scenario, seed, commit, strategy, attack."""
    values = dict(flatten(config))
    tags = {tag: str(values[key]) for tag, key in TAG_KEYS.items() if values.get(key) is not None}
    commit = source_commit()
    if commit:
        tags["commit"] = commit
    return tags
