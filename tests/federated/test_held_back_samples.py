"""A strategy's server-held samples (FLTrust's root set) reach the clients through the client app, not
through the strategy registry: a cluster worker may not have a plugin strategy installed."""

from __future__ import annotations

import json

import pytest

from testbed.federated import client, setup
from testbed.federated.strategies import server_samples
from testbed.scenario import Scenario
from tests.federated.test_federated_runs import FEDERATED


def _scenario(strategy: dict) -> Scenario:
    return Scenario.model_validate({**FEDERATED, "federated": {**FEDERATED["federated"], "strategy": strategy}})


def test_a_worker_without_the_strategys_declaration_partitions_as_the_driver(monkeypatch):
    scenario = _scenario({"name": "fltrust", "root_size": 40})
    driver = setup.federation_setup(scenario)  # reads the declaration: FLTrust holds 40 back
    assert server_samples(scenario.federated.strategy) == 40 and driver.root is not None and len(driver.root.y) == 40

    def not_installed(*args, **kwargs):
        raise KeyError("fltrust")  # what a worker without the plugin's distribution would raise

    monkeypatch.setattr("testbed.federated.strategies.registered_strategies", not_installed)
    setup._cached_setup.cache_clear()
    client.setup_of.cache_clear()
    worker = client.setup_of(json.dumps(scenario.model_dump(mode="json"), sort_keys=True), 40)

    assert [p.tolist() for p in worker.partitions] == [p.tolist() for p in driver.partitions]
    assert (worker.root.y == driver.root.y).all()
    with pytest.raises(KeyError):
        setup.federation_setup(scenario)  # without the count, the declaration is needed
