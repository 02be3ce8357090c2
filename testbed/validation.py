"""Everything a run needs that can be checked without starting workers: what `testbed validate`
and the first step of `testbed run` do after the schema has accepted a scenario.

Imports only the kind the scenario runs (its runner module) and the engine registry, so
validating a workload scenario loads neither Flower, Ray nor DeepSpeed.
"""

from __future__ import annotations

from testbed import kinds
from testbed.device import preflight_device
from testbed.engines.registry import preflight_engine
from testbed.scenario import Scenario
from testbed.trackers import check_trackers


def preflight(scenario: Scenario, source: str) -> None:
    """Refuse, with one line naming the file and field, a scenario that cannot run here."""
    runner = kinds.runner(scenario.kind)
    preflight_engine(scenario.engine, scenario.kind, runner.needs_one_of, source)
    runner.check(scenario, source)
    check_trackers(scenario.report, source)
    preflight_device(scenario, source)
