"""The ``federated:`` block of a scenario.

```yaml
federated:
  rounds: 30
  local_epochs: 2
  proximal_mu: 0.01                 # FedProx term of the local objective (SDEA's setting); default 0 = plain SGD
  strategy: {name: sdea, epochs: 5} # any of `testbed list strategies`; other keys are the strategy's own
  attack: {name: min_max, fraction: 0.2}
  sampling: {fraction: 0.5, min_clients: 2}  # clients per round, drawn from the root seed; default: all
  privacy: {mode: central, noise_multiplier: 1.0, clipping_norm: 1.0, target_epsilon: 8}  # DP-FedAvg
  baselines: [fedavg, no_attack]    # reference arms in the same run folder and report (testbed.federated.baselines)
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from testbed.config import PluginSpec, StrictModel


class AttackBlock(PluginSpec):
    """Which clients are Byzantine and what they do; the attack's own parameters are extra keys."""

    fraction: float = Field(0.2, ge=0, lt=1, description="share of clients that are malicious")
    threat_model: Literal["faithful", "marsfl"] = Field(
        "faithful", description="faithful: LIE / Min-Max / Min-Sum as their papers define them; marsfl: as SDEA's "
                                "authors' MarsFL code plays them, the crafted update uploaded as the model "
                                "(testbed.strategies.marsfl); other attacks are the same under both")


class ClientResources(StrictModel):
    """Resources of one client on Ray (Flower's ``client_resources``)."""

    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)


class ClientFaults(StrictModel):
    """Fault injection: some clients raise or hang from a given round on (to test fault tolerance)."""

    fraction: float = Field(0.1, gt=0, le=1, description="share of clients that fail")
    from_round: int = Field(1, gt=0)
    kind: Literal["raise", "hang"] = "raise"
    hang_s: float = Field(30.0, gt=0, description="how long a hanging client sleeps before replying")


class SamplingConfig(StrictModel):
    """Clients drawn per round (partial participation), by partition id from the root seed
    (`testbed.federated.sampling`): ``fraction`` of the N clients (rounded down, as Flower's
    ``fraction_train``) or ``count`` of them, never fewer than ``min_clients``."""

    fraction: float | None = Field(None, gt=0, le=1, description="share of the clients sampled each round")
    count: int | None = Field(None, gt=0, description="clients sampled each round")
    min_clients: int = Field(1, gt=0, description="the fewest clients a round samples (Flower's min_train_nodes)")

    @model_validator(mode="after")
    def _one_of(self) -> SamplingConfig:
        if (self.fraction is None) == (self.count is None):
            raise ValueError("set exactly one of fraction and count")
        if self.count is not None and self.count < self.min_clients:
            raise ValueError(f"count: {self.count} is below min_clients {self.min_clients}")
        return self

    def per_round(self, num_clients: int) -> int:
        """Clients sampled in every round of a federation of ``num_clients`` (at most all of them)."""
        base = self.count if self.count is not None else int((self.fraction or 0.0) * num_clients)
        return min(max(base, self.min_clients), num_clients)

    def rate(self, num_clients: int) -> float:
        """The per-round sampling probability q of any one client (the DP accountant's amplification)."""
        return self.per_round(num_clients) / num_clients


# The noise multipliers opacus' RDP accountant computes, measured on opacus 1.6 for sampling rates
# 1e-6..1: below ~1e-150 z^2 underflows (a ZeroDivisionError at q = 1, an endless series below), above
# ~1e7 its log-space subtraction fails (ValueError) and from ~1e3 one subsampled round's RDP takes
# seconds; at z = 100 epsilon is already at the floor log(1/delta)/62 that opacus' orders allow.
# 1e-6 (no noise to speak of) and 100 are far beyond any DP experiment.
NOISE_RANGE = (1e-6, 100.0)


class AuditConfig(StrictModel):
    """``federated.privacy.audit``: a one-run canary audit of the run's own DP mechanism
    (`testbed.federated.audit`): ``canaries`` canary clients, each included with probability 1/2,
    whose crafted updates pass through Flower's DP wrapper with the real clients' replies."""

    canaries: int = Field(gt=0, description="canary clients (about 1000 test an epsilon near 4.5 at delta 1e-5)")
    kind: Literal["client", "sample"] = Field(
        "client", description=("client: canary clients, in the population or not, for central DP; sample: canary "
                               "clients that always take part, each with its one canary sample or without it, "
                               "their every release through Flower's LocalDpMod, for local DP"))
    significance: float = Field(0.05, gt=0, lt=1, description="the lower bound holds with probability 1 - this")


class PrivacyConfig(StrictModel):
    """``federated.privacy``: which of Flower's DP mechanisms, its noise and clipping, the budget
    (the accountant and the mechanisms: `testbed.federated.privacy`, `testbed.federated.dp`)."""

    mode: Literal["central", "local"] = Field(
        "central", description="central: the server adds noise to the mean; local: each client to its update")
    clipping: Literal["fixed", "adaptive"] = Field("fixed", description="adaptive: Andrew et al. 2021 (central only)")
    clip_on: Literal["server", "client"] = Field("server", description="where central DP clips the updates")
    noise_multiplier: float = Field(1.0, gt=0, description="z: noise std = z * clipping_norm")
    clipping_norm: float = Field(1.0, gt=0, description="C; the initial norm of adaptive clipping")
    target_quantile: float = Field(0.5, ge=0, le=1, description="adaptive: share of updates left unclipped")
    clip_norm_lr: float = Field(0.2, gt=0, description="adaptive: step of the geometric norm update")
    clipped_count_stddev: float | None = Field(
        None, gt=0, description="adaptive: noise on the clipped count; default clients per round / 20")
    delta: float = Field(1e-5, gt=0, lt=1)
    target_epsilon: float | None = Field(None, gt=0, description="stop before a round would exceed it")
    audit: AuditConfig | None = Field(None, description="a one-run canary audit of the mechanism, in the same run")

    @field_validator("noise_multiplier")
    @classmethod
    def _accountable(cls, value: float) -> float:
        if not NOISE_RANGE[0] <= value <= NOISE_RANGE[1]:
            raise ValueError(f"{value:g} is outside [{NOISE_RANGE[0]:g}, {NOISE_RANGE[1]:g}], the range opacus' RDP "
                             "accountant computes (beyond 100 epsilon no longer falls: it is at its floor for "
                             "opacus' orders)")
        return value

    @model_validator(mode="after")
    def _local_is_fixed(self) -> PrivacyConfig:
        if self.mode == "local" and self.clipping == "adaptive":
            raise PydanticCustomError("local_adaptive", "local DP clips at a fixed norm (Flower's LocalDpMod): "
                                                        "use clipping: fixed, or mode: central")
        return self


class FederatedConfig(StrictModel):
    """Rounds, local training and the server's strategy of a federated scenario."""

    rounds: int = Field(10, gt=0)
    local_epochs: int = Field(1, gt=0)
    proximal_mu: float = Field(0.0, ge=0, description="FedProx's (mu/2)||w - w_global||^2 in every client's "
                                                        "local objective; 0 = FedAvg's plain local SGD")
    strategy: PluginSpec = Field(default_factory=lambda: PluginSpec(name="fedavg"))
    attack: AttackBlock | None = None
    client_resources: ClientResources = Field(default_factory=ClientResources)
    faults: ClientFaults | None = None
    sampling: SamplingConfig | None = Field(None, description="clients per round; default: every client, every round")
    privacy: PrivacyConfig | None = Field(None, description="DP with Flower's wrappers and mods, and an RDP "
                                                             "accountant (testbed.federated.privacy)")
    checkpoint_every: int = Field(1, gt=0, description="rounds between checkpoints")
    round_timeout_s: float = Field(600, gt=0, description="a round waits this long for its clients")
    baselines: list[str] = Field(
        default_factory=list, description="reference arms run beside the scenario with its seed: a strategy "
                                          "name replaces the strategy, no_attack removes the attack")

    def client_proximal_mu(self) -> float:
        """The clients' proximal weight: strategy ``fedprox``'s ``proximal_mu`` when set, else
        ``proximal_mu`` (`testbed.federated.checks` refuses the two set apart)."""
        if self.strategy.name == "fedprox":
            # The strategy's params were validated by its own Config (`FedProx.Config`) when the scenario
            # loaded; read here, not through the class, so the schema does not import the strategies.
            mu = self.strategy.params.get("proximal_mu")
            if mu is not None:
                return float(mu)
        return self.proximal_mu
