"""Validation of a federated scenario that needs no workers: everything `testbed validate` can refuse."""

from __future__ import annotations

from pydantic import ValidationError

from testbed.errors import ScenarioError, did_you_mean, shorten
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
    assert fed is not None  # the runner's check fills in the block's defaults first
    entry = _named(registered_strategies(), fed.strategy.name, "federated.strategy", source)
    try:
        strategy_config = entry.Config.model_validate(fed.strategy.params)
    except ValidationError as err:
        raise ScenarioError(describe_error(err, entry.Config, fed.strategy.params, source,
                                           prefix=("federated", "strategy"), extra_keys=("name",))) from None
    _check_public_size(strategy_config, source)
    if fed.attack is not None:
        _check_attack(fed.attack, registered_attacks(), source)
    n = scenario.data.num_clients
    f = declared_malicious(strategy_config, len(malicious_clients(scenario)))
    if n < entry.min_clients(f):
        raise ScenarioError(f"{source}: data.num_clients: strategy '{fed.strategy.name}' needs at least "
                            f"{entry.min_clients(f)} clients for {f} Byzantine ones; the scenario has {n}")
    if n < 2:
        raise ScenarioError(f"{source}: data.num_clients: a federation needs at least 2 clients")
    if fed.attack is not None:
        _check_benign_majority(scenario, fed.attack, registered_attacks(), len(malicious_clients(scenario)), source)
    try:
        federation_setup(scenario)  # builds the partitions: an impossible one names data.partition.*
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None


def _named(registry: dict, name: str, path: str, source: str):
    if name not in registry:
        hint = did_you_mean(name, registry)
        raise ScenarioError(f"{source}: {path}.name: unknown {shorten(name)}{hint}; "
                            f"valid: {', '.join(sorted(registry))}")
    return registry[name]


def _check_public_size(strategy_config, source: str) -> None:
    """A server-side public set (SDEA's) cannot be larger than its source can give (typeset is finite)."""
    from testbed.data.config import PublicDataConfig
    from testbed.data.public import largest_public_size

    public = getattr(strategy_config, "public", None)
    if not isinstance(public, PublicDataConfig):
        return
    largest = largest_public_size(public.source)
    if largest is not None and public.size > largest:
        raise ScenarioError(f"{source}: federated.strategy.public.size: {public.size} is more than public source "
                            f"'{public.source}' can give; its largest size is {largest}")


def _check_attack(attack, registry: dict, source: str) -> None:
    """The attack's parameters: their types (from the attack function's signature), then their
    values (the function's own checks, played once on a tiny input)."""
    from testbed.federated.attacks import attack_config, check_attack_values

    _named(registry, attack.name, "federated.attack", source)
    config = attack_config(attack.name)
    try:
        config.model_validate(attack.params)
    except ValidationError as err:
        raise ScenarioError(describe_error(err, config, attack.params, source, prefix=("federated", "attack"),
                                           extra_keys=("name", "fraction", "threat_model"))) from None
    try:
        check_attack_values(attack.name, attack.params)
    except ValueError as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        field = message.split(":", 1)[0]
        named = field.split("/")[0] in config.model_fields
        raise ScenarioError(f"{source}: federated.attack{'.' if named else ': '}{message}") from None


def _check_benign_majority(scenario: Scenario, attack, registry: dict, malicious: int, source: str) -> None:
    """An attack needs benign clients to hide among: one, or two for the omniscient attacks, which
    read the benign updates' spread."""
    n = scenario.data.num_clients
    needed = 2 if registry[attack.name].omniscient else 1
    if n - malicious < needed:
        raise ScenarioError(f"{source}: federated.attack.fraction: {attack.fraction} of {n} clients makes {malicious} "
                            f"Byzantine, leaving {n - malicious} benign; attack '{attack.name}' needs at least "
                            f"{needed} benign clients")
