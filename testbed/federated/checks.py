"""Validation of a federated scenario that needs no workers: everything `testbed validate` can refuse."""

from __future__ import annotations

import difflib

from pydantic import ValidationError

from testbed.errors import ScenarioError
from testbed.loading import describe_error
from testbed.scenario import Scenario


def check_federated(scenario: Scenario, source: str) -> None:
    """Refuse a federated scenario that cannot run, naming the field."""
    from strategies import ATTACKS
    from testbed.federated.setup import federation_setup, malicious_clients
    from testbed.federated.strategies import STRATEGIES, declared_malicious
    from testbed.workloads import WORKLOADS
    from testbed.workloads.base import FederatedWorkload

    if scenario.engine.type == "local" and scenario.engine.use_ray == "never":
        raise ScenarioError(f"{source}: engine.use_ray: federated clients run on Flower's Ray engine; use auto")
    if scenario.workload is None or not issubclass(WORKLOADS[scenario.workload.name], FederatedWorkload):
        valid = sorted(n for n, w in WORKLOADS.items() if issubclass(w, FederatedWorkload))
        raise ScenarioError(f"{source}: workload.name: federated clients need one of: {', '.join(valid)}")
    fed = scenario.federated
    entry = _named(STRATEGIES, fed.strategy.name, "federated.strategy", source)
    try:
        strategy_config = entry.Config.model_validate(fed.strategy.params)
    except ValidationError as err:
        raise ScenarioError(describe_error(err, entry.Config, fed.strategy.params, source,
                                           prefix=("federated", "strategy"), extra_keys=("name",))) from None
    if fed.attack is not None:
        _check_attack(fed.attack, ATTACKS, source)
    n = scenario.data.num_clients
    f = declared_malicious(strategy_config, len(malicious_clients(scenario)))
    if n < entry.min_clients(f):
        raise ScenarioError(f"{source}: data.num_clients: strategy '{fed.strategy.name}' needs at least "
                            f"{entry.min_clients(f)} clients for {f} Byzantine ones; the scenario has {n}")
    if n < 2:
        raise ScenarioError(f"{source}: data.num_clients: a federation needs at least 2 clients")
    try:
        federation_setup(scenario)  # builds the partitions: an impossible one names data.partition.*
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None


def _named(registry: dict, name: str, path: str, source: str):
    if name not in registry:
        match = difflib.get_close_matches(name, list(registry), n=1)
        hint = f" (did you mean '{match[0]}'?)" if match else ""
        raise ScenarioError(f"{source}: {path}.name: unknown '{name}'{hint}; valid: {', '.join(sorted(registry))}")
    return registry[name]


def _check_attack(attack, registry: dict, source: str) -> None:
    from testbed.runners.federated import attack_parameters

    entry = _named(registry, attack.name, "federated.attack", source)
    allowed = attack_parameters(entry.fn)
    for key in attack.params:
        if key not in allowed:
            match = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean '{match[0]}'?)" if match else ""
            raise ScenarioError(f"{source}: federated.attack.{key}: unknown key{hint}; valid keys: "
                                f"{', '.join(['name', 'fraction', *allowed])}")
