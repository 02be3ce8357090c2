"""The ``decentralized:`` block of a scenario: graph, algorithms, noise, privacy target, audit.

One run trains one or several algorithms (``algorithm: random_walk`` or a list, trained one after
the other on the same nodes, data and noise), each with the settings below; a per-algorithm block
(``random_walk:``, ``gossip:``, ``local_dp:``) overrides ``steps``, ``eval_every``,
``checkpoint_every`` and ``lr`` for that algorithm. What one step is:

* ``random_walk``: one hop of the token (Cyffers, Bellet, Upadhyay, ICML 2024, RW DP-SGD): the
  holder takes one clipped, noisy gradient step on the token model and forwards it along W.
* ``gossip``: one iteration of Muffliato-GD (Cyffers et al., NeurIPS 2022): every node takes a
  clipped, noisy local step, then ``gossip.rounds`` synchronous averaging rounds with W.
* ``local_dp``: one iteration of the no-network baseline: every node releases a clipped, noisy
  gradient and the releases are averaged exactly (every release is public).

Noise: a node's release is mean_i clip_C(grad l(x_i)) + N(0, (sigma C)^2 I): per-sample clipping at
``clip`` = C, Gaussian noise of multiplier ``sigma``. Changing all of one node's data moves the
clipped mean by at most C (``privacy.neighbouring: add_remove``, the node's data replaced by none)
or 2C (``replace``); the accountants use that sensitivity. Give ``sigma``, or omit it and set
``privacy.target_epsilon``: each algorithm's sigma is then calibrated so that its planned run ends
at the target. With both, each algorithm stops before its largest pairwise epsilon would exceed
the target (the report names the step and the pair).
``privacy.non_private_baseline: true`` trains each algorithm once more with no noise after the
private ones (the same steps, step size, walk and data), the reference for what privacy costs.

This module imports only pydantic and `testbed.config` (the scenario schema imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from testbed.config import FiniteValue, StrictModel

Algorithm = Literal["random_walk", "gossip", "local_dp"]
ALGORITHMS: tuple[str, ...] = ("random_walk", "gossip", "local_dp")
BASELINE = "nonprivate"  # the prefix of the noise-free arms' phase names and metrics
# The largest graph a scenario may name: the walk matrix is dense (n x n floats) and the
# accountants are quadratic in n or worse, so a larger graph would exhaust memory or time long
# before it trained (fig1_full.yaml, the paper's largest, has 2048 nodes).
MAX_NODES = 4096
MAX_EDGES = 500_000


class TopologySpec(BaseModel):
    """``{name: <graph builder>, <its parameters>}``: a graph of `topologies.GRAPH_BUILDERS`.

    The builder's parameters are checked by building the graph in the runner's ``check``.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, FiniteValue] = Field(init=False)

    name: str = Field(min_length=1)

    @property
    def spec(self) -> dict[str, Any]:
        """The mapping `topologies.graph_from_spec` takes."""
        return {"name": self.name, **(self.model_extra or {})}


class ModelConfig(StrictModel):
    """The model every node trains: multinomial logistic regression or a one-hidden-layer MLP."""

    arch: Literal["logreg", "mlp"] = "logreg"
    hidden: int = Field(32, gt=0, description="hidden units of the MLP")


class PhaseOverrides(StrictModel):
    """Per-algorithm overrides of the loop settings (unset: the top-level value)."""

    steps: int | None = Field(None, gt=0)
    eval_every: int | None = Field(None, gt=0)
    checkpoint_every: int | None = Field(None, gt=0)
    lr: float | None = Field(None, gt=0)


class RandomWalkConfig(PhaseOverrides):
    """Random-walk DP-SGD with the paper's contribution cap ("contribute, then only add noise")."""

    contributions_cap: int | None = Field(
        None, gt=0, description="max gradient contributions per node; default ceil(cap_factor * steps / n)")
    cap_factor: float = Field(1.25, gt=0, description="cap = ceil(cap_factor * steps / n) when no cap is set")
    accounting: Literal["network", "hitting_time", "local"] = Field("network", description=(
        "network: pairwise network DP (a node sees only the token's visits to it); hitting_time: the same, "
        "counting only the token's first visit to v after u (PN-f-DP's RDP (HT), never larger; no symmetry "
        "shortcut, O(n * edges) a step); local: every release "
        "public, a node's capped contributions composed, the local-DP baseline of Cyffers et al.'s Fig. 2 "
        "(the same walk, noise calibrated without amplification)"))


class GossipConfig(PhaseOverrides):
    """Muffliato-GD: noisy local step, then synchronous gossip rounds."""

    rounds: int | None = Field(
        None, gt=0, description="averaging rounds per iteration; default the Muffliato mixing time")
    accelerated: bool = Field(False, description="Chebyshev-accelerated gossip (Muffliato's option)")


class LocalDpConfig(PhaseOverrides):
    """Local DP baseline: noisy releases averaged exactly, no privacy amplification."""


class PrivacyConfig(StrictModel):
    """Privacy target and the accounting conventions."""

    target_epsilon: float | None = Field(
        None, gt=0, description="stop before any pair exceeds it; calibrates sigma when sigma is unset")
    delta: float = Field(1e-5, gt=0, lt=1)
    neighbouring: Literal["add_remove", "replace"] = "add_remove"
    conversion: Literal["balle", "mironov"] = Field("balle", description="RDP -> (epsilon, delta) conversion")
    non_private_baseline: bool = Field(False, description=(
        "also train each algorithm with no noise (sigma 0, all planned steps), logged as "
        "nonprivate.<algorithm>.<metric>: the utility the noise costs"))


class AuditConfig(StrictModel):
    """One-run canary audit (Steinke, Nasr, Jagielski 2023) of the pairs (source, v)."""

    canaries: int = Field(0, ge=0, description="0 turns the audit off")
    source: int = Field(0, ge=0, description="the node that hosts the canaries")
    significance: float = Field(0.05, gt=0, lt=1)


class ComparisonConfig(StrictModel):
    """Epsilon against shortest-path distance, random walk vs gossip vs local DP, in the setting of
    Fig. 1 of Cyffers, Bellet, Upadhyay (ICML 2024): Renyi loss at ``alpha`` for noise ``sigma``
    (sensitivity 1), one full walk of `topologies.walk_length` steps against one Muffliato
    averaging of the mixing time, each clipped at the local-DP loss of one release."""

    enabled: bool = True
    topologies: list[TopologySpec] = Field(default_factory=list, description="default: the run's topology")
    alpha: float = Field(2.0, gt=1)
    sigma: float = Field(1.0, gt=0)
    walk_factor: float = Field(20.0, gt=0, description="T = factor * ceil(ln n / gap) * (1/4 + sigma^2)/sigma^2")
    random_walk_view: Literal["sender_known", "sender_unknown"] = "sender_known"
    gossip_first_power: int = Field(1, ge=0, le=1, description="1: messages W^1..W^T, as the authors' code")
    accelerated: bool = Field(True, description="gossip rounds = accelerated mixing time, as the authors' Fig. 1")
    gossip_weights: Literal["powers", "polynomial"] = Field(
        "powers", description="account messages with W^t (the authors' code) or the Chebyshev polynomial run")
    clip_to_local: bool = True
    trials: int = Field(1, gt=0, description="draws of each random graph (mean, min, max over them)")
    source: int | None = Field(None, ge=0, description="one source node u (the authors' code: 0); default all")


class DecentralizedConfig(StrictModel):
    """Private decentralized learning on a graph whose nodes hold ``data.num_clients`` shards."""

    algorithm: Algorithm | list[Algorithm] = "random_walk"
    train: bool = Field(True, description="false: accounting and comparison only, no data are used")
    topology: TopologySpec
    model: ModelConfig = Field(default_factory=ModelConfig)
    steps: int = Field(200, gt=0)
    eval_every: int = Field(20, gt=0)
    checkpoint_every: int = Field(100, gt=0)
    lr: float = Field(0.1, gt=0)
    clip: float = Field(1.0, gt=0, description="per-sample gradient clipping norm C")
    sigma: float | None = Field(None, gt=0, description="noise multiplier; unset: from privacy.target_epsilon")
    batch_size: int | None = Field(None, gt=0, description="samples per local step; default all of the node's")
    random_walk: RandomWalkConfig = Field(default_factory=RandomWalkConfig)
    gossip: GossipConfig = Field(default_factory=GossipConfig)
    local_dp: LocalDpConfig = Field(default_factory=LocalDpConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    comparison: ComparisonConfig = Field(default_factory=ComparisonConfig)

    @field_validator("algorithm")
    @classmethod
    def _no_repeats(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise PydanticCustomError("algorithms",
                                          "needs at least one algorithm (use train: false for accounting only)")
            if len(set(value)) != len(value):
                raise PydanticCustomError("algorithms", "an algorithm is listed twice")
        return value

    @model_validator(mode="after")
    def _noise_is_defined(self) -> DecentralizedConfig:
        if self.train and self.sigma is None and self.privacy.target_epsilon is None:
            raise PydanticCustomError("noise",
                                      "set sigma (the noise multiplier) or privacy.target_epsilon to derive it")
        return self

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms trained, in order (none when ``train`` is false)."""
        if not self.train:
            return ()
        return tuple(self.algorithm) if isinstance(self.algorithm, list) else (self.algorithm,)

    def steps_field(self, algorithm: str) -> str:
        """The field that sets ``algorithm``'s steps: its own block's override, or the top-level one."""
        override = getattr(self, algorithm).steps is not None
        return f"decentralized.{algorithm}.steps" if override else "decentralized.steps"

    def phase(self, algorithm: str) -> PhaseSettings:
        """The loop settings of one algorithm, its overrides applied."""
        block: PhaseOverrides = getattr(self, algorithm)
        pick = lambda key: getattr(block, key) if getattr(block, key) is not None else getattr(self, key)
        return PhaseSettings(algorithm, pick("steps"), pick("eval_every"), pick("checkpoint_every"), pick("lr"))


@dataclass(frozen=True)
class PhaseSettings:
    """Resolved loop settings of one algorithm of a run."""

    algorithm: str
    steps: int
    eval_every: int
    checkpoint_every: int
    lr: float
