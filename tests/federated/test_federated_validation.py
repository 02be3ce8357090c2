"""`testbed validate` refuses federated scenarios that cannot run, before anything starts."""

from __future__ import annotations

import pytest

from tests.federated.test_federated_runs import FEDERATED


def _with_federated(**changes) -> dict:
    return {**FEDERATED, "federated": {**FEDERATED["federated"], **changes}}


CASES = [
    ("bulyan-too-few-clients", _with_federated(strategy={"name": "bulyan"}), ["data.num_clients", "bulyan", "7"]),
    ("krum-declared-f", _with_federated(strategy={"name": "krum", "num_malicious": 1}), ["krum", "5 clients"]),
    ("unknown-strategy", _with_federated(strategy={"name": "sdae"}),
     ["federated.strategy.name", "did you mean 'sdea'"]),
    ("strategy-param-typo", _with_federated(strategy={"name": "sdea", "epoch": 3}),
     ["federated.strategy.epoch", "did you mean 'epochs'"]),
    ("strategy-param-type", _with_federated(strategy={"name": "fedtrimmedavg", "beta": 0.7}),
     ["federated.strategy.beta", "less than 0.5"]),
    ("unknown-attack", _with_federated(attack={"name": "lei"}), ["federated.attack.name", "lie"]),
    ("attack-param-typo", _with_federated(attack={"name": "sign_flip", "scal": 2}),
     ["federated.attack.scal", "did you mean 'scale'"]),
    ("attack-fraction", _with_federated(attack={"name": "lie", "fraction": 1.5}), ["federated.attack.fraction"]),
    ("no-rounds", _with_federated(rounds=0), ["federated.rounds", "greater than 0"]),
    ("unknown-federated-key", _with_federated(round=3), ["federated.round", "did you mean 'rounds'"]),
    ("never-ray", {**FEDERATED, "engine": {"type": "local", "use_ray": "never"}}, ["engine.use_ray"]),
    ("impossible-shards", {**FEDERATED, "data": {**FEDERATED["data"], "partition": {"type": "shards",
                                                                                   "classes_per_client": 11}}},
     ["data.partition.classes_per_client"]),
]


@pytest.mark.parametrize("changes,words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_refuses_with_the_field_named(cli, write_scenario, changes, words):
    code, _, err = cli("validate", write_scenario(changes))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for word in words:
        assert word in err, err


def test_a_valid_federated_scenario_validates_without_starting_ray(cli, write_scenario):
    import ray

    code, out, err = cli("validate", write_scenario(FEDERATED))
    assert code == 0, err
    assert not ray.is_initialized()
