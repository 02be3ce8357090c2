"""No run finishes on NaN, and DP accounting is bounded (issue 37, item 3 and item 2's DP bullet).

A run whose loss or model turns non-finite stops in one line naming the round (federated) or the
step (decentralized, pretrain), exit 2, keeping the checkpoints written before; validation refuses
the parameter values that can only overflow (a server learning rate of 1e300, q = 1e6, a boost of
1e30) and the noise multipliers opacus' accountant cannot compute. The federated accountant is
stepped once per round and gives opacus' own numbers, checked against opacus' `RDPAccountant`.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from opacus.accountants import RDPAccountant

from testbed.federated.config import FederatedConfig, PrivacyConfig, SamplingConfig
from testbed.federated.privacy import RoundAccountant, epsilon_curve, last_round
from tests.core.test_bad_input_corpus import Case, Replace, _assert_one_line_naming, assert_refused_cleanly
from tests.decentralized.conftest import TINY as DECENTRALIZED
from tests.federated.test_federated_runs import FEDERATED
from tests.pretrain.test_pretrain_run import TINY_PRETRAIN

F = "federated"

CASES: list[Case] = [
    Case("strategy-fedadam-eta-1e300", F, {"federated": {"strategy": Replace({"name": "fedadam", "eta": 1e300})}},
         ("federated.strategy.eta", "less than or equal to 1000")),
    Case("strategy-fedyogi-eta-1e300", F, {"federated": {"strategy": Replace({"name": "fedyogi", "eta": 1e300})}},
         ("federated.strategy.eta",)),
    Case("strategy-fedavgm-server-lr-1e300", F,
         {"federated": {"strategy": Replace({"name": "fedavgm", "server_learning_rate": 1e300})}},
         ("federated.strategy.server_learning_rate",)),
    Case("strategy-qfedavg-q-1e6", F, {"federated": {"strategy": Replace({"name": "qfedavg", "q": 1e6})}},
         ("federated.strategy.q", "less than or equal to 100")),
    Case("attack-model-replacement-boost-1e30", F,
         {"federated": {"attack": Replace({"name": "model_replacement", "fraction": 0.25, "boost": 1e30})}},
         ("federated.attack.boost", "1e+06")),
    Case("privacy-noise-1e-300", F, {"federated": {"privacy": {"noise_multiplier": 1e-300}}},
         ("federated.privacy.noise_multiplier", "opacus")),
    Case("privacy-noise-1e300", F, {"federated": {"privacy": {"noise_multiplier": 1e300}}},
         ("federated.privacy.noise_multiplier", "opacus")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_parameter_that_can_only_overflow_is_refused_in_one_line(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def _write(tmp_path: Path, scenario: dict) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


# --- each kind stops on a non-finite loss ----------------------------------------------------------


@pytest.mark.integration
def test_a_diverging_federated_run_stops_naming_the_round(cli, tmp_path):
    scenario = copy.deepcopy(FEDERATED)
    scenario["workload"] = {**scenario["workload"], "lr": 1e30}
    scenario["federated"] = {**scenario["federated"], "rounds": 2}
    del scenario["federated"]["attack"]
    path = _write(tmp_path, scenario)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("workload.lr", "diverged at round 1"))
    assert code == 2, line
    assert not (tmp_path / "run").exists()  # diverged before its first checkpoint: nothing kept


def _decentralized(**changes: Any) -> dict[str, Any]:
    scenario: dict[str, Any] = copy.deepcopy(DECENTRALIZED)
    scenario["decentralized"] = {**scenario["decentralized"], "algorithm": "random_walk", **changes}
    scenario["decentralized"]["audit"] = {"canaries": 0}
    return scenario


def test_a_diverging_decentralized_run_stops_naming_the_step(cli, tmp_path):
    path = _write(tmp_path, _decentralized(lr=1e30, clip=1e30))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("decentralized.lr", "random_walk diverged at step 10"))
    assert code == 2, line
    assert not (tmp_path / "run").exists()


def test_a_decentralized_divergence_after_a_checkpoint_keeps_it_and_names_the_node(cli, tmp_path, monkeypatch):
    from testbed.decentralized import steps

    honest = steps.gossip_step

    def diverging(problem, phase, state, iteration, attack):
        honest(problem, phase, state, iteration, attack)
        if iteration == 5:  # node 5's model overflows in the last step (after its gossip, so only its own)
            state["params"][5, 0] = math.inf

    monkeypatch.setattr(steps, "gossip_step", diverging)
    scenario = _decentralized(algorithm="gossip", steps=6, eval_every=6, checkpoint_every=3)
    path = _write(tmp_path, scenario)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("decentralized.lr", "gossip diverged at step 6", "on node 5",
                                                   "up to step 4"))
    assert code == 2 and str(tmp_path / "run") in line
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.pt"))
    assert kept == ["ckpt-000000004.pt"]  # step 3 of the phase (offset 1), from before the divergence
    saved = torch.load(tmp_path / "run" / "checkpoints" / kept[0], weights_only=True)
    assert bool(saved["progress"]["state"]["params"].isfinite().all())


@pytest.mark.integration
def test_a_diverging_pretraining_run_stops_naming_the_step(cli, tmp_path):
    scenario = copy.deepcopy(TINY_PRETRAIN)
    scenario["pretrain"] = {**scenario["pretrain"], "lr": 1e30}
    path = _write(tmp_path, scenario)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    line = _assert_one_line_naming(err, path, [], ("pretrain.lr", "diverged at step 2"))
    assert code == 2, line
    assert not (tmp_path / "run").exists()


# --- the federated accountant: once per round, opacus' numbers, bounded ----------------------------


def _opacus_per_round(z: float, q: float, rounds: int, delta: float) -> list[float]:
    accountant = RDPAccountant()
    curve = []
    for _ in range(rounds):
        accountant.step(noise_multiplier=z, sample_rate=q)
        curve.append(accountant.get_epsilon(delta))
    return curve


@pytest.mark.slow
@pytest.mark.parametrize(("q", "z", "delta"), [(0.5, 0.8, 1e-3), (1.0, 1.3, 1e-5), (0.1, 2.0, 1e-5)])
def test_the_accountant_stepped_per_round_gives_opacus_own_epsilon_every_round(q, z, delta):
    config = PrivacyConfig(noise_multiplier=z, delta=delta)
    accountant = RoundAccountant(config, q)
    ours = [accountant.step() for _ in range(40)]
    assert ours == _opacus_per_round(z, q, 40, delta)  # identical floats, not merely close
    resumed = RoundAccountant(config, q, rounds=25)  # a run resumed from the checkpoint of round 25
    assert [resumed.step() for _ in range(15)] == ours[25:]


def test_the_last_round_is_found_without_walking_every_round():
    federated = FederatedConfig(rounds=10_000_000, sampling=SamplingConfig(fraction=0.5),
                                privacy=PrivacyConfig(noise_multiplier=0.8, delta=1e-3, target_epsilon=14.5))
    started = time.perf_counter()
    last = last_round(federated, 20)
    assert time.perf_counter() - started < 5.0  # was one conversion per round: 10^7 of them
    assert federated.privacy is not None
    curve = epsilon_curve(federated.privacy, 0.5, last + 1)
    assert curve[last - 1] <= 14.5 < curve[last]


def test_validating_a_long_dp_run_prints_no_opacus_warnings(cli, tmp_path):
    scenario = copy.deepcopy(FEDERATED)
    # 10^7 rounds at z = 50: epsilon stays at opacus' floor, where it warns about its orders.
    scenario["federated"] = {**scenario["federated"], "rounds": 10_000_000,
                             "privacy": {"noise_multiplier": 50.0, "delta": 1e-5, "target_epsilon": 8}}
    del scenario["federated"]["attack"]
    path = _write(tmp_path, scenario)
    code, out, err = cli("validate", path)
    assert (code, err) == (0, ""), err
    assert out.strip().endswith("ok")
