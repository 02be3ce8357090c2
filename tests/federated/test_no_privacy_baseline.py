"""``federated.baselines: [no_privacy]``: the DP run's non-private arm, for the privacy-utility question."""

from __future__ import annotations

from pathlib import Path

from testbed.federated.baselines import baseline_names, baseline_scenario
from testbed.federated.baselines_report import arm_label
from testbed.federated.privacy import epsilon_curve, last_round, sampling_rate
from testbed.loading import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_the_no_privacy_arm_drops_the_privacy_block_and_runs_the_rounds_the_budget_allows():
    scenario = load_scenario(ROOT / "scenarios" / "federated" / "dp-fedavg.yaml")
    federated = scenario.federated
    assert federated is not None and federated.privacy is not None
    stop = last_round(federated, scenario.data.num_clients)
    # The bundled scenario's budget stops it early, so the arm's round count is the private run's, not the file's.
    assert stop < federated.rounds
    curve = epsilon_curve(federated.privacy, sampling_rate(federated, scenario.data.num_clients), stop + 1)
    assert curve[stop - 1] <= federated.privacy.target_epsilon < curve[stop]

    arm = baseline_scenario(scenario, "no_privacy")

    assert arm.federated is not None and arm.federated.privacy is None and arm.federated.rounds == stop
    assert arm.federated.baselines == [] and arm.federated.strategy == federated.strategy
    assert arm.data == scenario.data and arm.seed == scenario.seed and arm.workload == scenario.workload
    assert "no_privacy" in baseline_names()
    assert arm_label(scenario.model_dump(mode="json"), "no_privacy") == "fedavg, no privacy"
