"""The ``federated:`` block of a scenario.

```yaml
federated:
  rounds: 30
  local_epochs: 2
  proximal_mu: 0.01                 # FedProx term of the local objective (SDEA's setting); default 0 = plain SGD
  strategy: {name: sdea, epochs: 5} # any of `testbed list strategies`; other keys are the strategy's own
  attack: {name: min_max, fraction: 0.2}
  baselines: [fedavg, no_attack]    # reference arms in the same run folder and report (testbed.federated.baselines)
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from testbed.config import PluginSpec, StrictModel
from testbed.data.config import PublicDataConfig


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
    checkpoint_every: int = Field(1, gt=0, description="rounds between checkpoints")
    round_timeout_s: float = Field(600, gt=0, description="a round waits this long for its clients")
    baselines: list[str] = Field(
        default_factory=list, description="reference arms run beside the scenario with its seed: a strategy "
                                          "name replaces the strategy, no_attack removes the attack")


# The typed parameters of the strategies (`testbed.federated.strategies.STRATEGIES`).


class NoParams(StrictModel):
    """A strategy without parameters of its own."""


class ByzantineCount(StrictModel):
    """Rules that must be told how many clients may be Byzantine (default: the attack's count)."""

    num_malicious: int | None = Field(None, ge=0)


class MultiKrumConfig(ByzantineCount):
    num_selected: int | None = Field(None, gt=0, description="updates averaged; default N - f")


class TrimmedAvgConfig(StrictModel):
    beta: float = Field(0.2, ge=0, lt=0.5, description="share trimmed at each end")


class DnCConfig(ByzantineCount):
    filter_frac: float = Field(1.0, gt=0)
    num_iters: int = Field(1, gt=0)
    sub_dim: int = Field(10000, gt=0)


class RFAConfig(StrictModel):
    nu: float = Field(1e-6, gt=0)
    max_iter: int = Field(100, gt=0)
    ftol: float = Field(1e-6, gt=0)


class FLTrustConfig(StrictModel):
    root_size: int = Field(100, gt=0, description="clean samples the server trains on each round")
    root_epochs: int = Field(1, gt=0)


class SDEAConfig(StrictModel):
    epochs: int = Field(20, gt=0, description="passes over the public set per round (paper: 20)")
    rule: Literal["code", "two_group"] = Field(
        "code", description="code: the authors' code (flagged keep their learned weight), which produced the "
                            "paper's tables; two_group: the paper text's two groups, the flagged one zeroed (ablation)")
    @field_validator("rule", mode="before")
    @classmethod
    def _renamed(cls, value: object) -> object:
        if value == "paper":
            raise ValueError("'paper' is now 'two_group' (the paper text's two groups, the flagged one zeroed); "
                             "the default, 'code', is the rule of the authors' code")
        return value

    bn_mode: Literal["train", "eval"] = Field(
        "train", description="batch norm of the virtual model: train (the authors' code) or eval (running statistics)")
    batch_size: int = Field(64, gt=0)
    lr: float = Field(0.005, gt=0)
    weight_decay: float = Field(1e-5, ge=0)
    public: PublicDataConfig = Field(default_factory=PublicDataConfig)
