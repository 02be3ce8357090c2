"""``dnc``: Divide-and-Conquer (Shejwalkar & Houmansadr 2021), from the `testbed.strategies` library."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

import testbed.strategies as robust
from testbed.federated.strategies.base import ByzantineCount, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class DnC(StrategyPlugin):
    """DnC: uploads scored by their projection on the top singular direction of random coordinate subsets."""

    name = "dnc"
    summary = "Divide-and-Conquer (Shejwalkar & Houmansadr 2021)"
    cost = "O(num_iters n sub_dim min(n, sub_dim)) time (an SVD of n x sub_dim per iteration), O(n d) memory"
    cost_class = "quadratic"  # while n <= sub_dim (10^4 by default), the SVD is n^2 sub_dim

    class Config(ByzantineCount):
        """The rule's filter and its random subsets of coordinates."""

        filter_frac: float = Field(1.0, gt=0)
        num_iters: int = Field(1, gt=0)
        sub_dim: int = Field(10000, gt=0)

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        return robust.DnC(num_malicious_nodes=f, filter_frac=config.filter_frac, num_iters=config.num_iters,
                          sub_dim=config.sub_dim, seed=setup.seeds.integer("dnc"), **flower_round_settings(setup))

    @classmethod
    def min_clients(cls, f: int) -> int:
        return f + 1
