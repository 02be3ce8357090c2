"""Validation of a federated scenario that needs no workers: everything `testbed validate` can refuse.

It imports neither torch nor Flower (each strategy and attack declares its config and checks
apart from its implementation) and loads no data: the partition and a backdoor's target are checked
on the training split's labels, cached (`testbed.federated.setup.check_federation_data`).
"""

from __future__ import annotations

from pydantic import ValidationError

from testbed.errors import ScenarioError, did_you_mean, shorten
from testbed.loading import describe_error
from testbed.scenario import Scenario


def check_federated(scenario: Scenario, source: str) -> None:
    """Refuse a federated scenario that cannot run, naming the field."""
    from testbed.federated.attacks import registered_attacks
    from testbed.federated.setup import check_federation_data, malicious_clients
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
    k = _check_sampling(fed, n, source)
    _check_strategy_values(scenario, entry, strategy_config, source)
    f = declared_malicious(strategy_config, len(malicious_clients(scenario)))
    if k < entry.min_clients(f):
        where = "data.num_clients" if k == n else "federated.sampling"
        raise ScenarioError(f"{source}: {where}: strategy '{fed.strategy.name}' needs at least "
                            f"{entry.min_clients(f)} clients per round for {f} Byzantine ones; the scenario has {k}")
    if n < 2:
        raise ScenarioError(f"{source}: data.num_clients: a federation needs at least 2 clients")
    if fed.attack is not None:
        _check_benign_majority(scenario, fed.attack, registered_attacks(), len(malicious_clients(scenario)), source)
    _check_privacy(fed, n, source)
    try:  # the partitions, on the labels: an impossible one names data.partition.*
        split = check_federation_data(scenario, entry.server_samples(strategy_config))
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None
    if fed.attack is not None and registered_attacks()[fed.attack.name].kind == "backdoor":
        _check_backdoor(fed.attack, split, source)


def _check_backdoor(attack, split, source: str) -> None:
    """A backdoor's target class and trigger against the scenario's own data (`SplitMetadata`): its
    classes, one sample's shape, the trigger's default value (the data's largest, `backdoor_params`)."""
    from testbed.federated.attacks import check_backdoor_data

    params = {"value": split.x_max, **attack.params}
    params.pop("boost", None)
    try:
        check_backdoor_data(attack.name, params, split.num_classes, split.sample_shape)
    except ValueError as err:
        raise ScenarioError(f"{source}: federated.attack.{str(err).strip().splitlines()[0]}") from None


def _check_privacy(fed, n: int, source: str) -> None:
    """The DP block: a rule its noise protects, adaptive clipping's count noise, a budget the first round keeps."""
    from testbed.federated.privacy import check_privacy

    try:
        check_privacy(fed, fed.strategy.name, n)
    except ValueError as err:
        raise ScenarioError(f"{source}: federated.{err}") from None
    except ImportError as err:
        raise ScenarioError(f"{source}: federated.privacy: {err}") from None


def _check_sampling(fed, n: int, source: str) -> int:
    """The clients per round (`testbed.federated.sampling`): a count or minimum the federation can give."""
    sampling = fed.sampling
    if sampling is None:
        return n
    for field in ("count", "min_clients"):
        value = getattr(sampling, field)
        if value is not None and value > n:
            raise ScenarioError(f"{source}: federated.sampling.{field}: {value} clients per round, but the "
                                f"federation has {n} (data.num_clients)")
    return int(sampling.per_round(n))


def _check_strategy_values(scenario: Scenario, entry, strategy_config, source: str) -> None:
    """Strategy parameters that depend on the rest of the scenario (FedProx's client term, q-FedAvg's
    lr): the strategy's own `check` says which."""
    try:
        entry.check(strategy_config, scenario)
    except ValueError as err:
        raise ScenarioError(f"{source}: federated.strategy.{err}") from None


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
    values (the checks the attack declares, `Attack.check`; a plugin's that declares none is played
    once on a tiny input)."""
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
    except (ValueError, OverflowError) as err:  # a value out of range, whichever way the attack says so
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
