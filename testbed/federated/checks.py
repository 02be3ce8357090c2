"""Validation of a federated scenario that needs no workers: everything `testbed validate` can refuse."""

from __future__ import annotations

from pydantic import ValidationError

from testbed.errors import ScenarioError, did_you_mean
from testbed.loading import describe_error
from testbed.scenario import Scenario


def check_federated(scenario: Scenario, source: str) -> None:
    """Refuse a federated scenario that cannot run, naming the field."""
    from testbed.federated.attacks import registered_attacks
    from testbed.federated.setup import federation_setup, malicious_clients
    from testbed.federated.strategies import declared_malicious, registered_strategies
    from testbed.workloads import registry

    if scenario.workload is None or not registry.is_federated(scenario.workload.name):
        valid = sorted(n for n in registry.workload_names() if registry.is_federated(n))
        raise ScenarioError(f"{source}: workload.name: federated clients need one of: {', '.join(valid)}")
    fed = scenario.federated
    entry = _named(registered_strategies(), fed.strategy.name, "federated.strategy", source)
    try:
        strategy_config = entry.Config.model_validate(fed.strategy.params)
    except ValidationError as err:
        raise ScenarioError(describe_error(err, entry.Config, fed.strategy.params, source,
                                           prefix=("federated", "strategy"), extra_keys=("name",))) from None
    if fed.attack is not None:
        _check_attack(fed.attack, registered_attacks(), source)
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
        hint = did_you_mean(name, registry)
        raise ScenarioError(f"{source}: {path}.name: unknown '{name}'{hint}; valid: {', '.join(sorted(registry))}")
    return registry[name]


def _check_attack(attack, registry: dict, source: str) -> None:
    from testbed.federated.attacks import attack_parameters

    entry = _named(registry, attack.name, "federated.attack", source)
    allowed = attack_parameters(entry.fn)
    for key in attack.params:
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            raise ScenarioError(f"{source}: federated.attack.{key}: unknown key{hint}; valid keys: "
                                f"{', '.join(['name', 'fraction', *allowed])}")
