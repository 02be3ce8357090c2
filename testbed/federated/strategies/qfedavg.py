"""``qfedavg``: Flower's q-FedAvg, fair aggregation weighing high-loss clients up (Li et al. 2020).

It reads the clients' ``train_loss`` (their mean loss over the local epochs) and, by default, the
workload's ``lr``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies.base import HELD, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class QFedAvg(StrategyPlugin):
    """q-FedAvg (Li et al. 2020, fair resource allocation): clients with a higher training loss weigh more."""

    name = "qfedavg"
    summary = "Flower's q-FedAvg: fair aggregation weighing high-loss clients up (Li et al. 2020)"
    cost = HELD

    class Config(StrictModel):
        """q-FedAvg (Li et al. 2020, fair resource allocation): clients with a higher training loss weigh more."""

        q: float = Field(0.1, ge=0, le=100, description="fairness; 0 is FedAvg (<= 100: Li et al. use q <= 15, and "
                                                          "loss^q overflows float32 updates soon after)")
        client_learning_rate: float | None = Field(
            None, gt=0, description="the clients' learning rate, from which the rule estimates the Lipschitz "
                                    "constant L = 1/lr; default: the workload's lr")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.QFedAvg(client_learning_rate=learning_rate(config, setup.scenario), q=config.q,
                              **flower_round_settings(setup))

    @classmethod
    def check(cls, config: Config, scenario: Any) -> None:
        learning_rate(config, scenario)


def learning_rate(config: QFedAvg.Config, scenario: Any) -> float:
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
