"""``fedyogi``: Flower's FedYogi, an adaptive server optimizer (Reddi et al. 2021)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.federated.strategies.base import STREAMED, StrategyPlugin, flower_round_settings
from testbed.federated.strategies.fedadam import FedAdam

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedYogi(StrategyPlugin):
    """FedAvg's mean as a pseudo-gradient, stepped by Yogi on the server (moments checkpointed)."""

    name = "fedyogi"
    summary = "Flower's FedYogi: adaptive server optimizer (Reddi et al. 2021)"
    cost = STREAMED
    streamed = True

    class Config(FedAdam.Config):
        """FedAdam's settings with Flower's FedYogi default server learning rate."""

        eta: float = Field(0.01, gt=0, le=1e3, description="server learning rate (Flower's FedYogi default)")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedYogi(eta=config.eta, tau=config.tau, beta_1=config.beta_1, beta_2=config.beta_2,
                              **flower_round_settings(setup))
