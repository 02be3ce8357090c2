"""``bulyan``: Flower's Bulyan (El Mhamdi et al. 2018), Krum's selection then a trimmed median."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.federated.strategies.base import PAIRWISE, ByzantineCount, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class Bulyan(StrategyPlugin):
    """Bulyan: n - 2f uploads chosen by Krum, then per coordinate the mean of those nearest the median."""

    name = "bulyan"
    summary = "Flower's Bulyan (El Mhamdi et al. 2018)"
    Config = ByzantineCount
    cost = PAIRWISE + ", then a coordinate-wise median O(n d)"
    cost_class = "quadratic"

    @classmethod
    def build(cls, config: ByzantineCount, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.Bulyan(num_malicious_nodes=f, **flower_round_settings(setup))

    @classmethod
    def min_clients(cls, f: int) -> int:
        return 4 * f + 3
