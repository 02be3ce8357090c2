"""``fedadagrad``: Flower's FedAdagrad, an adaptive server optimizer (Reddi et al. 2021)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies.base import STREAMED, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedAdagrad(StrategyPlugin):
    """FedAvg's mean as a pseudo-gradient, stepped by Adagrad on the server (moments checkpointed)."""

    name = "fedadagrad"
    summary = "Flower's FedAdagrad: adaptive server optimizer (Reddi et al. 2021)"
    cost = STREAMED
    streamed = True

    class Config(StrictModel):
        """Adaptive server optimizers of Reddi et al. 2021 (Flower's FedOpt family). Flower's ``eta_l``
        (the clients' learning rate) only appears in its log; the workload's own ``lr`` trains."""

        eta: float = Field(0.1, gt=0, le=1e3, description="server learning rate (<= 1e3: Reddi et al. tune it over "
                                                           "10^-3..10^1; larger only overflows the model)")
        tau: float = Field(1e-3, gt=0, description="added to the root of the second moment (adaptivity)")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedAdagrad(eta=config.eta, tau=config.tau, **flower_round_settings(setup))
