"""Server strategies a scenario can name in ``federated.strategy``: one module, one declaration each.

Every strategy of ``flwr.serverapp.strategy`` that aggregates model arrays is used as it is:
FedAvg, FedAvgM, FedProx, FedAdagrad, FedAdam, FedYogi, QFedAvg and the robust Krum, MultiKrum,
Bulyan, FedMedian, FedTrimmedAvg. Not here: FedXgbBagging and FedXgbCyclic (XGBoost trees sent as
bytes, not a model's arrays) and the DP wrappers (``federated.privacy`` wraps a strategy named
here). DnC, RFA, FLTrust and SDEA come from the `strategies` package.

Each module of this package declares one `StrategyPlugin` subclass (its name, ``Config``,
capabilities and ``build``; `testbed.federated.strategies.base`), as Flower keeps one strategy per
module. The registry is read off those classes, then the ``testbed.strategies`` entry points, both
admitted by the same `testbed.plugins.declare`: adding a built-in strategy is adding a module here.

Every strategy trains exactly the round's clients: all N, or the sample ``federated.sampling``
draws (`testbed.federated.sampling`), which the round loop shows it as the only nodes of the grid;
``min_train_nodes`` and ``min_available_nodes`` are that count, so a round never starts with only
the clients that happened to register first. The server optimizers' moments (FedAvgM, FedAdagrad,
FedAdam, FedYogi) live in the strategy; checkpoints keep them (`testbed.federated.optimizer_state`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from testbed.config import PluginSpec, StrictModel
from testbed.federated.strategies.base import (
    ByzantineCount,
    NoParams,
    StrategyPlugin,
    flower_round_settings,
    round_clients,
)
from testbed.plugins import declare

if TYPE_CHECKING:  # the registry imports no Flower: a strategy's `build` does
    from flwr.serverapp.strategy import Strategy

    from testbed.federated.setup import FederationSetup

__all__ = ["ByzantineCount", "NoParams", "StrategyPlugin", "answering", "build_strategy", "declared_malicious",
           "flower_round_settings", "registered_strategies", "round_clients", "server_samples"]


def builtin_strategies() -> Iterator[type[StrategyPlugin]]:
    """The strategy each module of this package declares (the classes defined there, not imported)."""
    for module_info in pkgutil.iter_modules(__path__):
        if module_info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        yield from (obj for obj in vars(module).values()
                    if inspect.isclass(obj) and issubclass(obj, StrategyPlugin) and obj.__module__ == module.__name__)


@cache
def registered_strategies() -> dict[str, type[StrategyPlugin]]:
    """Every strategy by name: the built-in ones, then those installed packages declare through the
    ``testbed.strategies`` entry-point group (read once per process)."""
    return declare("testbed.strategies", builtin_strategies(), StrategyPlugin)


def declared_malicious(config: StrictModel, setup_malicious: int) -> int:
    """The Byzantine count a rule is told: its own ``num_malicious`` or the attack's true count."""
    declared = getattr(config, "num_malicious", None)
    return setup_malicious if declared is None else declared


def build_strategy(setup: FederationSetup) -> Strategy:
    """The scenario's strategy as it declares it; the round loop wraps it in Flower's central-DP
    wrapper when the scenario asks (`testbed.federated.dp.private_strategy`)."""
    assert setup.scenario.federated is not None  # a federated scenario
    block = setup.scenario.federated.strategy
    declared = registered_strategies()[block.name]
    config = declared.Config.model_validate(block.params)
    return declared.build(config, setup, declared_malicious(config, len(setup.malicious)))


def server_samples(block: PluginSpec) -> int:
    """The training samples the strategy ``block`` names holds back for the server (`StrategyPlugin.server_samples`)."""
    declared = registered_strategies()[block.name]
    return declared.server_samples(declared.Config.model_validate(block.params))


def answering(setup: FederationSetup) -> type[StrategyPlugin] | None:
    """The declaration that answers for the run's strategy in the round loop (how its uploads may be
    held, what weight it gave each client); None under central DP, whose Flower wrapper stands
    between them and combines the uploads itself (equal weights, clipping, noise), and under an
    audit, whose canaries join the replies."""
    federated = setup.scenario.federated
    assert federated is not None  # a federated scenario
    privacy = federated.privacy
    if privacy is not None and (privacy.mode == "central" or privacy.audit is not None):  # `private_strategy` wraps it
        return None
    return registered_strategies()[federated.strategy.name]
