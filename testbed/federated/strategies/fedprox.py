"""``fedprox``: Flower's FedProx, FedAvg whose clients add a proximal term (Li et al. 2020).

``strategy: {name: fedprox, proximal_mu: 0.01}`` drives the same client term as
``federated.proximal_mu`` (`FederatedConfig.client_proximal_mu`); `FedProx.check` refuses the two
set apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from testbed.config import StrictModel
from testbed.federated.strategies.base import STREAMED, StrategyPlugin, flower_round_settings

if TYPE_CHECKING:  # the implementation is imported where a strategy is built (`build`)
    from flwr.serverapp import strategy as flower


class FedProx(StrategyPlugin):
    """FedAvg on the server; the clients' local objective gains (mu/2)||w - w_global||^2."""

    name = "fedprox"
    summary = "Flower's FedProx: FedAvg, clients add a proximal term (Li et al. 2020)"
    cost = STREAMED
    streamed = True

    class Config(StrictModel):
        """FedProx (Li et al. 2020): Flower's FedProx sends ``proximal_mu`` to the clients, whose local
        objective gains (mu/2)||w - w_global||^2. Unset, it is ``federated.proximal_mu``; set both, they
        must agree."""

        proximal_mu: float | None = Field(None, gt=0, description="the clients' proximal weight mu")

    @classmethod
    def build(cls, config: Config, setup: Any, f: int) -> flower.Strategy:
        from flwr.serverapp import strategy as flower

        assert setup.scenario.federated is not None  # a federated scenario
        return flower.FedProx(proximal_mu=setup.scenario.federated.client_proximal_mu(),
                              **flower_round_settings(setup))

    @classmethod
    def check(cls, config: Config, scenario: Any) -> None:
        mu, federated_mu = config.proximal_mu, scenario.federated.proximal_mu
        if mu is not None and federated_mu not in (0.0, mu):
            raise ValueError(f"proximal_mu: {mu:g} differs from federated.proximal_mu {federated_mu:g}; both set the "
                             "clients' proximal term: keep one")
        if mu is None and federated_mu == 0.0:
            raise ValueError("proximal_mu: fedprox needs the clients' proximal term mu > 0 (or "
                             "federated.proximal_mu)")
