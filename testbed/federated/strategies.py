"""Server strategies a scenario can name in ``federated.strategy``, each with its typed config.

Every strategy of ``flwr.serverapp.strategy`` that aggregates model arrays is used as it is:
FedAvg, FedAvgM, FedProx, FedAdagrad, FedAdam, FedYogi, QFedAvg and the robust Krum, MultiKrum,
Bulyan, FedMedian, FedTrimmedAvg. Not here: FedXgbBagging and FedXgbCyclic (XGBoost trees sent as
bytes, not a model's arrays) and the DP wrappers (``federated.privacy`` wraps a strategy named
here). DnC, RFA, FLTrust and SDEA come from the `strategies` package.

Every strategy trains exactly the round's clients: all N, or the sample ``federated.sampling``
draws (`testbed.federated.sampling`), which the round loop shows it as the only nodes of the grid;
``min_train_nodes`` and ``min_available_nodes`` are that count, so a round never starts with only
the clients that happened to register first. FedProx is FedAvg whose clients add the proximal
term: ``strategy: {name: fedprox, proximal_mu: 0.01}`` drives the same client term as
``federated.proximal_mu`` (`FederatedConfig.client_proximal_mu`); validation refuses the two set
apart. q-FedAvg reads the clients' ``train_loss`` (their mean loss over the local epochs) and, by
default, the workload's ``lr``. The server optimizers' moments (FedAvgM, FedAdagrad, FedAdam,
FedYogi) live in the strategy; checkpoints keep them (`testbed.federated.optimizer_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from flwr.serverapp import strategy as flower

import testbed.strategies as robust
from testbed.config import StrictModel
from testbed.data.public import augment_views, public_images
from testbed.federated.config import (
    ByzantineCount,
    DnCConfig,
    FedAdagradConfig,
    FedAdamConfig,
    FedAvgMConfig,
    FedProxConfig,
    FedYogiConfig,
    FLTrustConfig,
    MultiKrumConfig,
    NoParams,
    QFedAvgConfig,
    RFAConfig,
    SDEAConfig,
    TrimmedAvgConfig,
)
from testbed.federated.dp import private_strategy
from testbed.federated.sampling import clients_per_round
from testbed.federated.setup import FederationSetup
from testbed.plugins import load_entry_points


@dataclass(frozen=True)
class StrategyEntry:
    """A registered strategy: its config, how to build it, and the client count it needs.

    This is the strategy plugin API (``testbed.strategies`` entry points name an instance; see
    docs/extending.md):

    - ``Config``: the typed settings of ``federated.strategy`` besides ``name`` (`NoParams` for none);
      unknown keys are refused by validation. A ``num_malicious`` field, where present, is the
      Byzantine count the rule is told (default: the attack's true count, `declared_malicious`).
    - ``build(config, setup, f)``: the Flower strategy for one run, given the validated config, the
      `FederationSetup` and the Byzantine count ``f``. Pass it ``**flower_round_settings(setup)`` so
      it trains exactly the round's clients (`round_clients`) and evaluates on the server only.
    - ``summary``: one line for ``testbed list strategies``.
    - ``min_clients(f)``: the fewest clients per round the rule needs to tolerate ``f`` Byzantine
      ones; validation refuses a scenario with fewer.
    - ``cost``: the server's aggregation cost for n uploads of d parameters, as text ("O(n d) time,
      O(n d) memory"); the robustness report prints it beside the measured time.
    """

    Config: type[StrictModel]
    build: Callable[[Any, FederationSetup, int], flower.Strategy]
    summary: str
    min_clients: Callable[[int], int] = lambda f: 1  # clients needed for f Byzantine
    cost: str = "not stated"  # the server's aggregation cost in n uploads of d parameters (the report shows it)


# What one round's aggregation costs the server, for n uploads of d parameters each.
STREAMED = ("O(n d) time; O(d) memory plus a fixed budget, uploads staged (testbed.federated.staging) unless a "
            "model attack or DP clipping needs every upload, then O(n d)")
HELD = "O(n d) time, O(n d) memory (every upload held)"
PAIRWISE = "O(n^2 d) time (Gram matrix of all uploads), O(n^2 + n d) memory"


def round_clients(setup: FederationSetup) -> int:
    """The clients every round trains (all, or the sample's size)."""
    assert setup.scenario.federated is not None  # a federated scenario
    return clients_per_round(setup.scenario.federated.sampling, setup.num_clients)


def flower_round_settings(setup: FederationSetup) -> dict[str, Any]:
    """The keyword arguments of Flower's ``FedAvg`` (and its subclasses) that make a strategy train
    exactly the round's clients and evaluate on the server only: every strategy passes them."""
    k = round_clients(setup)
    return {"fraction_train": 1.0, "fraction_evaluate": 0.0, "min_train_nodes": k, "min_available_nodes": k}


def _build_fedprox(config: FedProxConfig, setup: FederationSetup, f: int) -> flower.Strategy:
    assert setup.scenario.federated is not None  # a federated scenario
    return flower.FedProx(proximal_mu=setup.scenario.federated.client_proximal_mu(), **flower_round_settings(setup))


def _build_qfedavg(config: QFedAvgConfig, setup: FederationSetup, f: int) -> flower.Strategy:
    return flower.QFedAvg(client_learning_rate=qfedavg_learning_rate(config, setup.scenario), q=config.q,
                          **flower_round_settings(setup))


def qfedavg_learning_rate(config: QFedAvgConfig, scenario: Any) -> float:
    """q-FedAvg's client learning rate: its own, else the workload's ``lr``; ValueError without either."""
    if config.client_learning_rate is not None:
        return config.client_learning_rate
    lr = scenario.workload.params.get("lr") if scenario.workload is not None else None
    if lr is None and scenario.workload is not None:
        from testbed.workloads.registry import config_class

        lr = getattr(config_class(scenario.workload.name)(), "lr", None)
    if lr is None:
        raise ValueError("client_learning_rate: the workload has no lr; set it")
    return float(lr)


def _build_fltrust(config: FLTrustConfig, setup: FederationSetup, f: int) -> flower.Strategy:
    def server_update(global_state: dict[str, torch.Tensor], server_round: int) -> dict[str, torch.Tensor]:
        from testbed.federated.training import train_on  # the server trains its root set like a client

        generator = setup.seeds.torch(f"fltrust.round.{server_round}")
        assert setup.root is not None  # carved for fltrust by the setup
        return train_on(setup, global_state, setup.root, config.root_epochs, generator)

    return robust.FLTrust(server_update_fn=server_update, **flower_round_settings(setup))


def _build_sdea(config: SDEAConfig, setup: FederationSetup, f: int) -> flower.Strategy:
    shape = setup.train.image_shape
    if shape is None:
        raise ValueError("SDEA needs image data for its public set")
    public = torch.from_numpy(public_images(config.public, shape, setup.seeds.numpy("sdea.public")))
    return robust.SDEA(model_fn=setup.build_model, public_x=public, augment=augment_views, epochs=config.epochs,
                       rule=config.rule, bn_mode=config.bn_mode, seed=setup.seeds.integer("sdea"),
                       batch_size=config.batch_size, lr=config.lr, weight_decay=config.weight_decay,
                       **flower_round_settings(setup))


STRATEGIES: dict[str, StrategyEntry] = {
    "fedavg": StrategyEntry(NoParams, lambda c, s, f: flower.FedAvg(**flower_round_settings(s)), "Flower's FedAvg",
                            cost=STREAMED),
    "krum": StrategyEntry(ByzantineCount,
                          lambda c, s, f: flower.Krum(num_malicious_nodes=f, **flower_round_settings(s)),
                          "Flower's Krum (Blanchard et al. 2017)", lambda f: 2 * f + 3, PAIRWISE),
    "multikrum": StrategyEntry(
        MultiKrumConfig,
        lambda c, s, f: flower.MultiKrum(num_malicious_nodes=f,
                                         num_nodes_to_select=c.num_selected or round_clients(s) - f,
                                         **flower_round_settings(s)),
        "Flower's MultiKrum", lambda f: 2 * f + 3, PAIRWISE),
    "bulyan": StrategyEntry(ByzantineCount,
                            lambda c, s, f: flower.Bulyan(num_malicious_nodes=f, **flower_round_settings(s)),
                            "Flower's Bulyan (El Mhamdi et al. 2018)", lambda f: 4 * f + 3,
                            PAIRWISE + ", then a coordinate-wise median O(n d)"),
    "fedmedian": StrategyEntry(NoParams, lambda c, s, f: flower.FedMedian(**flower_round_settings(s)),
                               "Flower's coordinate-wise median",
                               cost="O(n d) time (np.median partitions each coordinate), O(n d) memory"),
    "fedtrimmedavg": StrategyEntry(TrimmedAvgConfig,
                                   lambda c, s, f: flower.FedTrimmedAvg(beta=c.beta, **flower_round_settings(s)),
                                   "Flower's trimmed mean",
                                   cost="O(n d) time (np.partition per coordinate), O(n d) memory"),
    "dnc": StrategyEntry(
        DnCConfig,
        lambda c, s, f: robust.DnC(num_malicious_nodes=f, filter_frac=c.filter_frac, num_iters=c.num_iters,
                                   sub_dim=c.sub_dim, seed=s.seeds.integer("dnc"), **flower_round_settings(s)),
        "Divide-and-Conquer (Shejwalkar & Houmansadr 2021)", lambda f: f + 1,
        "O(num_iters n sub_dim min(n, sub_dim)) time (an SVD of n x sub_dim per iteration), O(n d) memory"),
    "rfa": StrategyEntry(RFAConfig,
                         lambda c, s, f: robust.RFA(nu=c.nu, max_iter=c.max_iter, ftol=c.ftol,
                                                    **flower_round_settings(s)),
                         "RFA: geometric median by smoothed Weiszfeld (Pillutla et al. 2022)",
                         cost="O(max_iter n d) time (Weiszfeld iterations), O(n d) memory"),
    "fltrust": StrategyEntry(FLTrustConfig, _build_fltrust,
                             "FLTrust: trust scores from a server root set (Cao et al. 2021)",
                             cost=HELD + ", plus the server's training on its root set"),
    "sdea": StrategyEntry(SDEAConfig, _build_sdea, "SDEA: self-driven entropy aggregation (Huang et al., ICML 2024)",
                          cost="O(epochs (n d + n forward passes over the public set)) time, O(n d) memory"),
    "fedavgm": StrategyEntry(
        FedAvgMConfig,
        lambda c, s, f: flower.FedAvgM(server_learning_rate=c.server_learning_rate,
                                       server_momentum=c.server_momentum, **flower_round_settings(s)),
        "Flower's FedAvgM: FedAvg with server momentum (Hsu et al. 2019)", cost=STREAMED),
    "fedprox": StrategyEntry(FedProxConfig, _build_fedprox,
                             "Flower's FedProx: FedAvg, clients add a proximal term (Li et al. 2020)",
                             cost=STREAMED),
    "fedadagrad": StrategyEntry(
        FedAdagradConfig, lambda c, s, f: flower.FedAdagrad(eta=c.eta, tau=c.tau, **flower_round_settings(s)),
        "Flower's FedAdagrad: adaptive server optimizer (Reddi et al. 2021)", cost=STREAMED),
    "fedadam": StrategyEntry(
        FedAdamConfig,
        lambda c, s, f: flower.FedAdam(eta=c.eta, tau=c.tau, beta_1=c.beta_1, beta_2=c.beta_2,
                                       **flower_round_settings(s)),
        "Flower's FedAdam: adaptive server optimizer (Reddi et al. 2021)", cost=STREAMED),
    "fedyogi": StrategyEntry(
        FedYogiConfig,
        lambda c, s, f: flower.FedYogi(eta=c.eta, tau=c.tau, beta_1=c.beta_1, beta_2=c.beta_2,
                                       **flower_round_settings(s)),
        "Flower's FedYogi: adaptive server optimizer (Reddi et al. 2021)", cost=STREAMED),
    "qfedavg": StrategyEntry(QFedAvgConfig, _build_qfedavg,
                             "Flower's q-FedAvg: fair aggregation weighing high-loss clients up (Li et al. 2020)",
                             cost=HELD),
}



@cache
def registered_strategies() -> dict[str, StrategyEntry]:
    """Every strategy by name: the built-in ones, then those installed packages declare through
    the `testbed.strategies` entry-point group (read once per process)."""
    load_entry_points("testbed.strategies", STRATEGIES, StrategyEntry)
    return STRATEGIES


def declared_malicious(config: StrictModel, setup_malicious: int) -> int:
    """The Byzantine count a rule is told: its own ``num_malicious`` or the attack's true count."""
    declared = getattr(config, "num_malicious", None)
    return setup_malicious if declared is None else declared


def build_strategy(setup: FederationSetup) -> flower.Strategy:
    """The scenario's strategy, ready for the round loop (in Flower's central-DP wrapper when asked)."""
    assert setup.scenario.federated is not None  # a federated scenario
    block = setup.scenario.federated.strategy
    entry = registered_strategies()[block.name]
    config = entry.Config.model_validate(block.params)
    return private_strategy(entry.build(config, setup, declared_malicious(config, len(setup.malicious))),
                            setup.scenario)
