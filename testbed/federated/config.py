"""The ``federated:`` block of a scenario.

```yaml
federated:
  rounds: 30
  local_epochs: 2
  proximal_mu: 0.01                 # FedProx term of the local objective (SDEA's setting); 0 = plain SGD
  strategy: {name: sdea, epochs: 5} # any of `testbed list strategies`; other keys are the strategy's own
  attack: {name: min_max, fraction: 0.2}
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from testbed.config import PluginSpec, StrictModel


class AttackBlock(PluginSpec):
    """Which clients are Byzantine and what they do; the attack's own parameters are extra keys."""

    fraction: float = Field(0.2, ge=0, lt=1, description="share of clients that are malicious")


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
    proximal_mu: float = Field(0.01, ge=0)
    strategy: PluginSpec = Field(default_factory=lambda: PluginSpec(name="fedavg"))
    attack: AttackBlock | None = None
    client_resources: ClientResources = Field(default_factory=ClientResources)
    faults: ClientFaults | None = None
    checkpoint_every: int = Field(1, gt=0, description="rounds between checkpoints")
    round_timeout_s: float = Field(600, gt=0, description="a round waits this long for its clients")
