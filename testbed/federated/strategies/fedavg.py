"""``fedavg``: Flower's FedAvg, the example-weighted mean of the uploads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from testbed.federated.strategies.base import STREAMED, StrategyPlugin, Weights, example_weights, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.app import ArrayRecord, Message
    from flwr.serverapp import strategy as flower


class FedAvg(StrategyPlugin):
    """Flower's FedAvg (McMahan et al. 2017)."""

    name = "fedavg"
    summary = "Flower's FedAvg"
    cost = STREAMED
    streamed = True

    @classmethod
    def build(cls, config: Any, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        return flower.FedAvg(**flower_round_settings(setup))

    @classmethod
    def client_weights(cls, strategy: flower.Strategy, ids: list[int], replies: list[Message] | None,
                       new_arrays: ArrayRecord | None, examples: list[float]) -> Weights:
        return example_weights(replies, examples)
