"""``fltrust``: FLTrust (Cao et al. 2021), trust scores from the server's own clean root set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

import testbed.strategies as robust
from testbed.config import StrictModel
from testbed.federated.strategies.base import HELD, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    import torch
    from flwr.serverapp import strategy as flower


class FLTrust(StrategyPlugin):
    """FLTrust: each round the server trains its root set like a client and trusts uploads by cosine to it."""

    name = "fltrust"
    summary = "FLTrust: trust scores from a server root set (Cao et al. 2021)"
    cost = HELD + ", plus the server's training on its root set"

    class Config(StrictModel):
        """The server's root set (carved from the training data before partitioning) and its training."""

        root_size: int = Field(100, gt=0, description="clean samples the server trains on each round")
        root_epochs: int = Field(1, gt=0)

    @classmethod
    def server_samples(cls, config: Config) -> int:
        return config.root_size

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        def server_update(global_state: dict[str, torch.Tensor], server_round: int) -> dict[str, torch.Tensor]:
            from testbed.federated.training import train_on  # the server trains its root set like a client

            generator = setup.seeds.torch(f"fltrust.round.{server_round}")
            assert setup.root is not None  # carved for fltrust by the setup
            return train_on(setup, global_state, setup.root, config.root_epochs, generator)

        return robust.FLTrust(server_update_fn=server_update, **flower_round_settings(setup))
