"""Strategy ``clipped_mean``: clip every update to a quantile of the round's update norms, then average."""

from __future__ import annotations

import torch
from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies import StrategyPlugin, flower_round_settings
from testbed.strategies import Aggregate, RobustFedAvg


class ClippedMean(RobustFedAvg):
    """Norm bounding (Sun et al. 2019) with a bound the round's own norms set, so no scale is tuned."""

    flags_clients = False  # it weighs every client, never rejects one

    def __init__(self, *, quantile: float, **fedavg):
        super().__init__(**fedavg)
        self.quantile = quantile

    def _rule(self, server_round, updates, num_examples, global_vec, template):
        norms = updates.norm(dim=1)
        bound = torch.quantile(norms, self.quantile)
        shrink = (bound / norms.clamp_min(1e-12)).clamp(max=1.0)  # an update within the bound is kept as it is
        weights = num_examples / num_examples.sum() * shrink  # each client's share of the aggregate
        flagged = torch.zeros(len(updates), dtype=torch.bool)
        return Aggregate(weights @ updates, weights, flagged), {"clip_bound": float(bound)}


class ClippedMeanStrategy(StrategyPlugin):
    """The declaration the entry point names: everything the testbed reads about the strategy."""

    name = "clipped_mean"
    summary = "example plugin: clip updates to a quantile of their norms, then average"
    cost = "O(n d) time (norms, one weighted sum), O(n d) memory (every upload held)"
    cost_class = "linear"

    class Config(StrictModel):
        """The keys of ``federated.strategy`` besides ``name``."""

        quantile: float = Field(0.5, gt=0, le=1, description="the norm bound is this quantile of the update norms")

    @classmethod
    def build(cls, config, setup, f):
        # flower_round_settings: train exactly the round's clients (all, or the sample), evaluate on the server
        return ClippedMean(quantile=config.quantile, **flower_round_settings(setup))

    @classmethod
    def min_clients(cls, f):
        return 2 * f + 1  # the median norm is an honest client's while f < n / 2
