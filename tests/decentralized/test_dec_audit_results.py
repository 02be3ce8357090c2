"""`testbed.decentralized.audit_results`: what a run folder says of its audit, as the privacy page
and the auditor's page both read it."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.decentralized.audit import audit_power
from testbed.decentralized.audit_results import (
    CONSISTENT,
    TOO_WEAK,
    VIOLATION,
    algorithm_power,
    pair_audits,
    pair_verdict,
    trained_algorithms,
)
from testbed.report.render import RunData


@pytest.mark.parametrize("lower, upper, power, said", [
    (2.5, 2.0, 4.0, VIOLATION),  # the audit proves more than the accountant allows, whatever its power
    (0.5, 8.0, 2.9, TOO_WEAK),   # the bound is beyond what the audit can show
    (0.5, 4.0, 5.1, CONSISTENT),
    (4.0, 4.0, 5.1, CONSISTENT),  # equal is no violation
])
def test_each_pair_gets_the_verdict_its_bounds_and_the_power_give(lower, upper, power, said):
    assert pair_verdict(lower, upper, power) == said


def _data(tmp_path, final=None) -> RunData:
    artifacts = {"gossip.pairwise_epsilon": np.zeros((3, 3)), "gossip.audit_observer": np.array([1, 2]),
                 "gossip.audit_distance": np.array([1, 2]), "gossip.audit_lower": np.array([0.4, 3.0]),
                 "gossip.audit_upper": np.array([4.0, 2.0])}
    config = {"decentralized": {"privacy": {"delta": 1e-5}, "audit": {"canaries": 200, "significance": 0.05}}}
    return RunData(tmp_path, config, [], {"final_metrics": final or {}}, artifacts)


def test_the_pairs_are_read_from_the_artifacts_with_the_recorded_power_or_the_configs(tmp_path):
    recorded = _data(tmp_path, {"gossip.audit_power": 5.0})
    assert trained_algorithms(recorded) == ["gossip"]
    assert algorithm_power(recorded, "gossip") == 5.0
    pairs = pair_audits(recorded, "gossip", 5.0)
    assert [(p.observer, p.distance, p.kind) for p in pairs] == [(1, 1, CONSISTENT), (2, 2, VIOLATION)]
    # A run from before the power was recorded: the bound over every draw, from the config.
    assert algorithm_power(_data(tmp_path), "gossip") == pytest.approx(audit_power(200, 1e-5, 0.05))
