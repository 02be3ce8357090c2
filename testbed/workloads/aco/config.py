"""Typed config of the ``aco`` workload and its check, free of torch (the registry reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

Policy = Literal["aco", "greedy", "greedy_budget", "random"]


def _default_baselines() -> list[Policy]:  # a named factory: mypy infers a lambda's list as list[str]
    return ["greedy", "random"]
POLICIES = ("aco", "greedy", "greedy_budget", "random")  # the canonical order: the last two need ACO's budgets first
MATCHED = ("greedy_budget", "random")  # the policies that acquire as many features as ACO on each instance


class ACOConfig(StrictModel):
    """Data source, arbitrary-subset classifier, and the acquisition policies with their estimator."""

    source: Literal["parity", "cube", "tabular"] = "parity"
    num_samples: int = Field(3000, ge=50, description="synthetic sources: instances generated")
    num_features: int = Field(10, ge=2, le=24, description="parity: features in all")
    informative: int = Field(2, ge=2, description="parity: features whose sign parity is the label")
    sigma: float = Field(0.3, gt=0, description="cube: noise of the informative features")
    hidden: int = Field(128, gt=0)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(128, gt=0)
    policy: Policy = "aco"
    baselines: list[Policy] = Field(default_factory=_default_baselines, description=(
        "greedy: one-feature candidates, stops when none pays; greedy_budget: greedy's choices without its stop, "
        "as many features as ACO on each instance; random: random order, ACO's budget"))
    cost: float = Field(0.05, ge=0, description="alpha: cost of acquiring one feature")
    neighbours: int = Field(20, gt=0, description="k nearest training instances of the estimator")
    exhaustive_up_to: int = Field(10, ge=0, le=14, description="enumerate all subsets up to this many unobserved")
    random_candidates: int = Field(256, gt=0, description="random candidate subsets beyond that")
    eval_instances: int = Field(200, gt=0)
    cost_grid: list[float] = Field(default_factory=lambda: [0.01, 0.03, 0.1, 0.3])

    @field_validator("cost_grid")
    @classmethod
    def _non_negative_costs(cls, grid: list[float]) -> list[float]:
        if not grid or any(c < 0 for c in grid):
            raise ValueError("needs at least one cost, all non-negative")
        return grid

    @property
    def policies(self) -> list[str]:
        """The headline policy and the baselines, each once, in the canonical order."""
        return [p for p in POLICIES if p == self.policy or p in self.baselines]


def check(config: ACOConfig, data: DataConfig) -> None:
    """Parity's informative features must exist, the matched-budget policies need ACO, and ``tabular``
    needs tabular data."""
    if config.source == "parity" and config.informative > config.num_features:
        raise ScenarioError(f"workload.informative: {config.informative} informative features need "
                            f"num_features >= {config.informative} (got {config.num_features})")
    for matched in MATCHED:
        if matched in config.policies and "aco" not in config.policies:
            raise ScenarioError(f"workload.baselines: '{matched}' acquires as many features as ACO did on the same "
                                "instance, so 'aco' must be the policy or a baseline")
    if config.source == "tabular":
        from testbed.data.select import is_image_data  # the source's metadata: no data loaded (issue 39)

        if is_image_data(data):
            raise ScenarioError(f"workload.source: 'tabular' needs a tabular data.dataset, got image data "
                                f"'{data.dataset}' (use breast_cancer, wine or iris)")
