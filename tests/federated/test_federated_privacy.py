"""Federated DP (``federated.privacy``): the accountant against opacus' own, Flower's wrappers and mods
as the scenario builds them, and one tiny run: epsilon per round, the budget stop, the report.

The reference numbers come from opacus' ``RDPAccountant`` stepped once per round, as a user of
opacus would account the same mechanism, never from the module under test.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import torch
import yaml
from flwr.app import ArrayRecord, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower
from opacus.accountants import RDPAccountant

from testbed.federated.config import FederatedConfig, PrivacyConfig
from testbed.federated.dp import SeededPrivacy, client_mods, private_strategy
from testbed.federated.privacy import epsilon_curve, last_round
from testbed.scenario import Scenario
from tests.federated.test_federated_runs import FEDERATED
from tests.processes import cli_process


def _opacus_epsilon(q: float, sigma: float, rounds: int, delta: float) -> float:
    accountant = RDPAccountant()
    for _ in range(rounds):
        accountant.step(noise_multiplier=sigma, sample_rate=q)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(("q", "sigma", "delta"), [(0.5, 0.8, 1e-3), (1.0, 1.3, 1e-5), (0.1, 2.0, 1e-5)])
def test_epsilon_after_r_rounds_equals_opacus_rdp_accountant(q, sigma, delta):
    config = PrivacyConfig(noise_multiplier=sigma, delta=delta)
    curve = epsilon_curve(config, q, 7)
    assert curve == pytest.approx([_opacus_epsilon(q, sigma, r, delta) for r in range(1, 8)], rel=1e-9)


def test_local_dp_is_accounted_without_amplification():
    config = PrivacyConfig(mode="local", noise_multiplier=1.5, delta=1e-5)
    assert epsilon_curve(config, 0.25, 3)[-1] == pytest.approx(_opacus_epsilon(1.0, 1.5, 3, 1e-5), rel=1e-9)


def test_the_target_stops_before_the_round_that_would_exceed_it():
    eps = [_opacus_epsilon(1.0, 1.0, r, 1e-5) for r in (1, 2, 3)]
    federated = FederatedConfig(rounds=5, privacy=PrivacyConfig(target_epsilon=(eps[1] + eps[2]) / 2))
    assert last_round(federated, 4) == 2
    assert last_round(FederatedConfig(rounds=5, privacy=PrivacyConfig()), 4) == 5


def _scenario(privacy: dict, **federated) -> Scenario:
    data = copy.deepcopy(FEDERATED)
    data["federated"] = {"rounds": 2, "strategy": {"name": "fedavg"}, "privacy": privacy, **federated}
    return Scenario.model_validate(data)


def test_the_scenario_builds_flowers_own_wrappers_and_mods():
    inner = flower.FedAvg()
    server = private_strategy(inner, _scenario({"clipping_norm": 0.5}, sampling={"fraction": 0.5}))
    assert isinstance(server, SeededPrivacy)
    assert isinstance(server.dp, flower.DifferentialPrivacyServerSideFixedClipping)
    assert server.dp.num_sampled_clients == 2 and server.dp.clipping_norm == 0.5
    adaptive = private_strategy(inner, _scenario({"clipping": "adaptive", "clip_on": "client",
                                                  "noise_multiplier": 0.1}))
    assert isinstance(adaptive, SeededPrivacy)
    assert isinstance(adaptive.dp, flower.DifferentialPrivacyClientSideAdaptiveClipping)
    from flwr.clientapp.mod import adaptiveclipping_mod

    assert client_mods(_scenario({"clipping": "adaptive", "clip_on": "client"})) == [adaptiveclipping_mod]
    assert private_strategy(inner, _scenario({"mode": "local"})) is inner  # the clients add the noise
    assert len(client_mods(_scenario({"mode": "local"}))) == 1


def _reply(state: dict, pid: int, examples: int) -> Message:
    content = RecordDict({"arrays": ArrayRecord(state),
                          "metrics": MetricRecord({"num-examples": examples, "partition-id": pid})})
    meta = Metadata(run_id=1, message_id=f"m{pid}", src_node_id=100 + pid, dst_node_id=0, reply_to_message_id="i",
                    group_id="1", created_at=time.time(), ttl=60.0, message_type=MessageType.TRAIN)
    return Message(content, metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def test_central_dp_clips_weighs_clients_equally_and_draws_the_same_noise_for_the_same_seed():
    # Two clients, one with 9x the examples and a huge update: clipped to C = 1 and averaged with
    # equal weights, the mean update is (e1 + e2) / 2 plus noise of std z C / m (tiny z here).
    scenario = _scenario({"noise_multiplier": 1e-6, "clipping_norm": 1.0})
    scenario = scenario.model_copy(update={"data": scenario.data.model_copy(update={"num_clients": 2})})

    def aggregate() -> torch.Tensor:
        strategy = private_strategy(flower.FedAvg(), scenario)
        assert isinstance(strategy, SeededPrivacy)
        assert isinstance(strategy.dp, flower.DifferentialPrivacyServerSideFixedClipping)
        strategy.dp.current_arrays = ArrayRecord({"w": torch.zeros(2)})  # what configure_train keeps
        replies = [_reply({"w": torch.tensor([100.0, 0.0])}, 0, 90), _reply({"w": torch.tensor([0.0, 1.0])}, 1, 10)]
        arrays, _ = strategy.aggregate_train(1, replies)
        assert arrays is not None
        return arrays.to_torch_state_dict()["w"]

    first = aggregate()
    assert first == pytest.approx(torch.tensor([0.5, 0.5]), abs=1e-4)
    assert torch.equal(first, aggregate())


@pytest.mark.integration
def test_a_dp_fedavg_run_records_epsilon_stops_at_the_target_and_reports_accuracy_against_epsilon(tmp_path):
    # Central DP on 4 clients, 2 sampled a round (q = 0.5), under a BadNets attack: every round
    # records epsilon (opacus' number) and the attack success rate; the target lets 2 of 3 rounds run.
    q, sigma, delta = 0.5, 1.0, 1e-3
    eps = [_opacus_epsilon(q, sigma, r, delta) for r in (1, 2, 3)]
    scenario = copy.deepcopy(FEDERATED)
    scenario["federated"] = {
        "rounds": 3, "local_epochs": 1, "strategy": {"name": "fedavg"}, "sampling": {"fraction": 0.5},
        "attack": {"name": "badnets", "fraction": 0.25},
        "privacy": {"noise_multiplier": sigma, "clipping_norm": 1.0, "delta": delta,
                    "target_epsilon": (eps[1] + eps[2]) / 2}}
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(scenario))
    done = cli_process("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert done.returncode == 0, done.stderr
    rounds = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in rounds if "round" in r]
    assert [r["round"] for r in rounds] == [1, 2]
    assert [r["epsilon"] for r in rounds] == pytest.approx(eps[:2], rel=1e-9)
    assert all(0 <= r["attack_success_rate"] <= 1 for r in rounds)
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "<h2>Privacy</h2>" in page and "accuracy-vs-epsilon.png" in page and "stopped by the target" in page
    assert "attack success rate, triggered inputs" in page
    assert Path(tmp_path / "run" / "report" / "accuracy-vs-epsilon.png").is_file()


def test_adaptive_clipping_norm_survives_a_checkpoint():
    # A resumed run must clip with the norm the uninterrupted run had reached, not the initial one.
    from testbed.federated.dp import dp_checkpoint, restore_dp

    scenario = _scenario({"clipping": "adaptive", "noise_multiplier": 0.1, "clipping_norm": 0.1})
    running = private_strategy(flower.FedAvg(), scenario)
    assert isinstance(running, SeededPrivacy)
    assert isinstance(running.dp, flower.DifferentialPrivacyServerSideAdaptiveClipping)
    running.dp.current_arrays = ArrayRecord({"w": torch.zeros(2)})
    running.aggregate_train(1, [_reply({"w": torch.full((2,), 5.0)}, pid, 10) for pid in range(4)])
    # Every update was clipped; Flower 1.42 counts clipped updates where Andrew et al. count unclipped
    # ones, so its norm shrinks (0.1 -> 0.091) where the paper's would grow: moved either way.
    assert running.dp.clipping_norm != pytest.approx(0.1)
    resumed = private_strategy(flower.FedAvg(), scenario)
    restore_dp(resumed, dp_checkpoint(running))
    assert isinstance(resumed, SeededPrivacy) and isinstance(resumed.dp, type(running.dp))
    assert resumed.dp.clipping_norm == running.dp.clipping_norm
