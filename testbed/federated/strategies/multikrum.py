"""``multikrum``: Flower's MultiKrum, the mean of the uploads Krum scores best."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.federated.strategies.base import (
    PAIRWISE,
    ByzantineCount,
    StrategyPlugin,
    flower_round_settings,
    round_clients,
)

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class MultiKrum(StrategyPlugin):
    """MultiKrum (El Mhamdi et al. 2018): Krum's scores, the best ``num_selected`` averaged."""

    name = "multikrum"
    summary = "Flower's MultiKrum"
    cost = PAIRWISE
    cost_class = "quadratic"

    class Config(ByzantineCount):
        """Krum's Byzantine count and how many of the best-scored uploads are averaged."""

        num_selected: int | None = Field(None, gt=0, description="updates averaged; default N - f (N: clients "
                                                                  "per round)")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        selected = config.num_selected or round_clients(setup) - f
        return flower.MultiKrum(num_malicious_nodes=f, num_nodes_to_select=selected, **flower_round_settings(setup))

    @classmethod
    def min_clients(cls, f: int) -> int:
        return 2 * f + 3
