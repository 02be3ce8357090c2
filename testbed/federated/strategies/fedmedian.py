"""``fedmedian``: Flower's coordinate-wise median of the uploads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.federated.strategies.base import StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedMedian(StrategyPlugin):
    """The coordinate-wise median (Yin et al. 2018)."""

    name = "fedmedian"
    summary = "Flower's coordinate-wise median"
    cost = "O(n d) time (np.median partitions each coordinate), O(n d) memory"

    @classmethod
    def build(cls, config: Any, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedMedian(**flower_round_settings(setup))
