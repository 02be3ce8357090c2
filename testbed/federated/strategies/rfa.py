"""``rfa``: RFA, the geometric median by smoothed Weiszfeld (Pillutla et al. 2022)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

import testbed.strategies as robust
from testbed.config import StrictModel
from testbed.federated.strategies.base import StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class RFA(StrategyPlugin):
    """RFA: the example-weighted geometric median of the uploads."""

    name = "rfa"
    summary = "RFA: geometric median by smoothed Weiszfeld (Pillutla et al. 2022)"
    cost = "O(max_iter n d) time (Weiszfeld iterations), O(n d) memory"

    class Config(StrictModel):
        """Weiszfeld's smoothing, iteration budget and stopping tolerance."""

        nu: float = Field(1e-6, gt=0)
        max_iter: int = Field(100, gt=0)
        ftol: float = Field(1e-6, gt=0)

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        return robust.RFA(nu=config.nu, max_iter=config.max_iter, ftol=config.ftol, **flower_round_settings(setup))
