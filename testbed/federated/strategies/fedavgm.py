"""``fedavgm``: Flower's FedAvgM, FedAvg with server momentum (Hsu et al. 2019)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies.base import STREAMED, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedAvgM(StrategyPlugin):
    """FedAvg with server momentum; the momentum lives in the strategy and checkpoints keep it."""

    name = "fedavgm"
    summary = "Flower's FedAvgM: FedAvg with server momentum (Hsu et al. 2019)"
    cost = STREAMED
    streamed = True

    class Config(StrictModel):
        """FedAvg with server momentum (Hsu et al. 2019), Flower's FedAvgM."""

        server_learning_rate: float = Field(1.0, gt=0, le=1e3, description="server step size (<= 1e3: a larger "
                                            "one only overflows the model)")
        server_momentum: float = Field(0.0, ge=0, lt=1)

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedAvgM(server_learning_rate=config.server_learning_rate,
                              server_momentum=config.server_momentum, **flower_round_settings(setup))
