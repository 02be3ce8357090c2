"""``krum``: Flower's Krum (Blanchard et al. 2017), the one upload closest to its n - f - 2 neighbours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.federated.strategies.base import (
    PAIRWISE,
    ByzantineCount,
    StrategyPlugin,
    Weights,
    flower_round_settings,
    selected_one_weights,
)

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.app import ArrayRecord, Message
    from flwr.serverapp import strategy as flower


class Krum(StrategyPlugin):
    """Krum: the global model becomes one client's upload, so that client has all the weight."""

    name = "krum"
    summary = "Flower's Krum (Blanchard et al. 2017)"
    Config = ByzantineCount
    cost = PAIRWISE
    cost_class = "quadratic"

    @classmethod
    def build(cls, config: ByzantineCount, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.Krum(num_malicious_nodes=f, **flower_round_settings(setup))

    @classmethod
    def min_clients(cls, f: int) -> int:
        return 2 * f + 3

    @classmethod
    def client_weights(cls, strategy: flower.Strategy, ids: list[int], replies: list[Message] | None,
                       new_arrays: ArrayRecord | None, examples: list[float]) -> Weights:
        return selected_one_weights(replies, new_arrays)
