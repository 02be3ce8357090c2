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
    ("unknown-threat-model", _with_federated(attack={"name": "lie", "threat_model": "mars"}),
     ["federated.attack.threat_model", "'faithful' or 'marsfl'", "(got 'mars')"]),
    ("no-rounds", _with_federated(rounds=0), ["federated.rounds", "greater than 0"]),
    ("unknown-federated-key", _with_federated(round=3), ["federated.round", "did you mean 'rounds'"]),
    ("unknown-baseline", _with_federated(baselines=["fedavgg"]),
     ["federated.baselines[0]", "did you mean 'fedavg'", "no_attack"]),
    ("baseline-twice", _with_federated(strategy={"name": "fedmedian"}, baselines=["fedavg", "fedavg"]),
     ["federated.baselines[1]", "twice"]),
    ("baseline-is-the-strategy", _with_federated(baselines=["fedavg"]), ["federated.baselines[0]", "own strategy"]),
    ("no-attack-baseline-without-attack", _with_federated(attack=None, baselines=["no_attack"]),
     ["federated.baselines[0]", "needs a federated.attack"]),
    ("no-privacy-baseline-without-privacy", _with_federated(baselines=["no_privacy"]),
     ["federated.baselines[0]", "needs a federated.privacy"]),
    ("baseline-needs-more-clients", _with_federated(baselines=["bulyan"]),
     ["data.num_clients", "bulyan", "in baseline 'bulyan'"]),
    ("simple-cnn-on-8x8-digits", {**FEDERATED, "workload": {"name": "classifier", "arch": "simple_cnn"}},
     ["workload.arch", "16x16", "arch: cnn"]),
    ("sdea-rule-renamed", _with_federated(strategy={"name": "sdea", "rule": "paper"}),
     ["federated.strategy.rule", "'two_group'"]),
    ("fltrust-baseline-unpaired", _with_federated(strategy={"name": "fedmedian"}, baselines=["fltrust"]),
     ["federated.baselines[0]", "'fltrust'", "server-held set"]),
    ("never-ray", {**FEDERATED, "engine": {"type": "local", "use_ray": "never"}}, ["engine.use_ray"]),
    ("public-size-over-the-pool", _with_federated(strategy={"name": "sdea", "public": {"source": "typeset",
                                                                                    "size": 4321}}),
     ["federated.strategy.public.size", "4321", "'typeset'", "largest size is 4320"]),
    ("unknown-public-source", _with_federated(strategy={"name": "sdea", "public": {"source": "imagenet"}}),
     ["federated.strategy.public.source", "'sample_images'", "'noise'", "'typeset'", "imagenet"]),
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


@pytest.mark.parametrize("attack", ["min_sum", "sign_flip"])
def test_the_marsfl_threat_model_validates_with_any_attack(cli, write_scenario, attack):
    code, _, err = cli("validate", write_scenario(_with_federated(attack={"name": attack, "threat_model": "marsfl"})))
    assert code == 0, err


def test_a_public_set_as_large_as_its_source_validates(cli, write_scenario):
    whole_pool = {"name": "sdea", "public": {"source": "typeset", "size": 4320}}
    code, _, err = cli("validate", write_scenario(_with_federated(strategy=whole_pool)))
    assert code == 0, err
