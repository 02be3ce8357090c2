"""``fedtrimmedavg``: Flower's coordinate-wise trimmed mean."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies.base import StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedTrimmedAvg(StrategyPlugin):
    """The trimmed mean (Yin et al. 2018): per coordinate, the mean without the ``beta`` share at each end."""

    name = "fedtrimmedavg"
    summary = "Flower's trimmed mean"
    cost = "O(n d) time (np.partition per coordinate), O(n d) memory"

    class Config(StrictModel):
        """How much of each end the mean leaves out."""

        beta: float = Field(0.2, ge=0, lt=0.5, description="share trimmed at each end")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedTrimmedAvg(beta=config.beta, **flower_round_settings(setup))
