"""Client sampling (``federated.sampling``) and every Flower strategy by name.

One federated run (tiny: 4 clients, 3 sampled per round, 2 rounds) trains under FedAdam with every
other Flower strategy the registry adds and the robust rules as baselines, paired arms of the same
run folder: each arm must train exactly the seed's sample of each round, and nothing else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from flwr.serverapp import strategy as flower
from pydantic import ValidationError

from testbed.faults import KILL_AFTER_RECORDS
from testbed.federated.clients_record import read_rounds
from testbed.federated.config import FederatedConfig, SamplingConfig
from testbed.federated.sampling import clients_per_round, sample_clients
from testbed.federated.strategies import registered_strategies
from testbed.seeding import SeedTree
from tests.federated.test_federated_runs import FEDERATED
from tests.processes import cli_process

SAMPLED: dict[str, Any] = {
    **FEDERATED, "name": "fed-sampled",
    "federated": {**FEDERATED["federated"], "rounds": 2, "proximal_mu": 0.01, "strategy": {"name": "fedadam"},
                  "attack": {"name": "lie", "fraction": 0.25}, "sampling": {"count": 3},
                  "baselines": ["fedavgm", "fedprox", "fedadagrad", "fedyogi", "qfedavg", "dnc", "sdea"]},
}
# Flower's strategies that do not aggregate a model's arrays, or that wrap another (federated.privacy).
NOT_MODEL_STRATEGIES = {"Strategy", "Result", "FedXgbBagging", "FedXgbCyclic"}


def test_sampling_takes_a_fraction_rounded_down_or_a_count_never_below_the_minimum():
    assert SamplingConfig(fraction=0.5).per_round(5) == 2  # as Flower's fraction_train: int(0.5 * 5)
    assert SamplingConfig(fraction=0.1, min_clients=3).per_round(10) == 3
    assert SamplingConfig(count=3).per_round(10) == 3
    assert SamplingConfig(fraction=1.0).per_round(7) == 7
    assert SamplingConfig(count=3).rate(12) == pytest.approx(0.25)  # the DP accountant's q
    assert clients_per_round(None, 9) == 9


@pytest.mark.parametrize("bad", [{"fraction": 0}, {"fraction": 1.5}, {"fraction": -0.1}, {},
                                 {"fraction": 0.5, "count": 2}, {"count": 1, "min_clients": 2}, {"fractoin": 0.5}])
def test_sampling_refuses_a_fraction_outside_0_1_and_anything_but_one_of_fraction_and_count(bad):
    with pytest.raises(ValidationError):
        SamplingConfig.model_validate(bad)


def test_each_round_samples_the_seed_trees_draw_by_partition_id():
    sampling = SamplingConfig(count=4)
    seeds = SeedTree(11)

    rounds = [sample_clients(sampling, 10, seeds, r) for r in range(1, 6)]

    for server_round, sample in enumerate(rounds, start=1):
        draw = seeds.numpy(f"federated.sampling.round.{server_round}").choice(10, size=4, replace=False)
        assert sample == sorted(draw.tolist())
    assert rounds == [sample_clients(sampling, 10, SeedTree(11), r) for r in range(1, 6)]  # same seed, same clients
    assert len({tuple(s) for s in rounds}) > 1  # a new draw each round
    assert sample_clients(None, 4, seeds, 1) == [0, 1, 2, 3]


def test_fedprox_drives_the_clients_proximal_term():
    named = FederatedConfig.model_validate({"strategy": {"name": "fedprox", "proximal_mu": 0.1}})
    inherited = FederatedConfig.model_validate({"strategy": {"name": "fedprox"}, "proximal_mu": 0.02})
    plain = FederatedConfig.model_validate({"strategy": {"name": "fedavg"}, "proximal_mu": 0.03})

    assert (named.client_proximal_mu(), inherited.client_proximal_mu(), plain.client_proximal_mu()) == (0.1, 0.02, 0.03)


@pytest.mark.integration
def test_every_flower_strategy_that_aggregates_arrays_is_registered():
    dp_wrappers = {name for name in flower.__all__ if name.startswith("DifferentialPrivacy")}
    expected = {name.lower() for name in set(flower.__all__) - NOT_MODEL_STRATEGIES - dp_wrappers}

    assert expected <= set(registered_strategies())
    assert {"fedadam", "fedyogi", "fedadagrad", "fedavgm", "fedprox", "qfedavg"} <= expected
    listed = cli_process("list", "strategies")
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in expected)


def _records(run_dir: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sampled")
    (folder / "fed.yaml").write_text(json.dumps(SAMPLED))
    done = cli_process("run", folder / "fed.yaml", "--run-dir", folder / "run", "--quiet")
    assert done.returncode == 0, done.stderr
    return folder / "run"


@pytest.mark.integration
def test_every_strategy_trains_exactly_the_seeds_sample_each_round(sampled_run):
    expected = [sample_clients(SamplingConfig(count=3), 4, SeedTree(SAMPLED["seed"]), r) for r in (1, 2)]
    assert expected[0] != expected[1]
    arms = [sampled_run, *(sampled_run / "baselines" / name for name in SAMPLED["federated"]["baselines"])]

    for arm in arms:
        rounds = _records(arm)
        assert [r["clients_sampled"] for r in rounds] == expected, arm.name
        assert [(r["clients_requested"], r["clients_trained"], r["clients_failed"]) for r in rounds] == [(3, 3, 0)] * 2
        assert all(math.isfinite(r["test_accuracy"]) and math.isfinite(r["train_loss"]) for r in rounds), arm.name


@pytest.mark.integration
def test_only_the_sampled_clients_reply(sampled_run):
    """The per-client record of a rule that weighs clients holds exactly the sampled partitions."""
    rounds = _records(sampled_run / "baselines" / "dnc")
    lines = read_rounds(sampled_run / "baselines" / "dnc")

    assert [sorted(line.ids.tolist()) for line in lines] == [r["clients_sampled"] for r in rounds]


@pytest.mark.integration
def test_a_resumed_run_samples_the_same_clients_through_its_new_nodes(tmp_path):
    """Flower gives the resumed run new node ids; it asks the clients their partitions again."""
    scenario = {**FEDERATED, "federated": {**FEDERATED["federated"], "sampling": {"count": 2}}}
    (tmp_path / "fed.yaml").write_text(json.dumps(scenario))
    killed = cli_process("run", tmp_path / "fed.yaml", "--run-dir", tmp_path / "run", "--quiet",
                         env_extra={KILL_AFTER_RECORDS: "2"})
    assert killed.returncode == -9

    resumed = cli_process("resume", tmp_path / "run", "--quiet")

    assert resumed.returncode == 0, resumed.stderr
    rounds = _records(tmp_path / "run")
    expected = [sample_clients(SamplingConfig(count=2), 4, SeedTree(FEDERATED["seed"]), r) for r in (1, 2, 3)]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert [r["clients_sampled"] for r in rounds] == expected
    assert [r["clients_trained"] for r in rounds] == [2, 2, 2]


def _replies(setup, partitions: list[int]) -> list:
    from tests.strategies.test_flower_strategies import _reply

    base = setup.build_model().state_dict()
    return [_reply({k: v + 0.01 * (p + 1) if v.is_floating_point() else v for k, v in base.items()}, 100 + p,
                   partition_id=p) for p in partitions]


def test_an_omniscient_attacker_sampled_with_fewer_than_two_benign_clients_uploads_what_it_trained():
    from testbed.federated.server import RoundLoop
    from testbed.federated.setup import federation_setup
    from testbed.scenario import Scenario
    from testbed.strategies.vectors import flatten_state

    scenario = Scenario.model_validate({**FEDERATED, "federated": {
        **FEDERATED["federated"], "attack": {"name": "lie", "fraction": 0.5}, "sampling": {"count": 3}}})
    setup = federation_setup(scenario)
    bad, good = sorted(setup.malicious), sorted(set(range(4)) - setup.malicious)
    loop = RoundLoop(None, setup, None, 0, setup.build_model().state_dict())  # no run, no strategy: only the adversary

    def uploads(replies: list) -> list:
        return [flatten_state(r.content["arrays"].to_torch_state_dict()) for r in replies]

    starved = _replies(setup, [bad[0], good[0]])
    before = uploads(starved)
    assert loop._inject_attack(1, starved) is True
    assert all(a.equal(b) for a, b in zip(before, uploads(starved)))  # nothing rewritten

    fed = _replies(setup, [bad[0], *good])
    before = uploads(fed)
    assert loop._inject_attack(1, fed) is False
    after = uploads(fed)
    assert not after[0].equal(before[0]) and all(a.equal(b) for a, b in zip(before[1:], after[1:]))
