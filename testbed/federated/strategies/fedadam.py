"""``fedadam``: Flower's FedAdam, an adaptive server optimizer (Reddi et al. 2021)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.federated.strategies.base import STREAMED, StrategyPlugin, flower_round_settings
from testbed.federated.strategies.fedadagrad import FedAdagrad

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedAdam(StrategyPlugin):
    """FedAvg's mean as a pseudo-gradient, stepped by Adam on the server (moments checkpointed)."""

    name = "fedadam"
    summary = "Flower's FedAdam: adaptive server optimizer (Reddi et al. 2021)"
    cost = STREAMED
    streamed = True

    class Config(FedAdagrad.Config):
        """FedAdagrad's settings and Adam's two moment decays."""

        beta_1: float = Field(0.9, ge=0, lt=1, description="first-moment decay")
        beta_2: float = Field(0.99, ge=0, lt=1, description="second-moment decay")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedAdam(eta=config.eta, tau=config.tau, beta_1=config.beta_1, beta_2=config.beta_2,
                              **flower_round_settings(setup))
