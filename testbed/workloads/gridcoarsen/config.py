"""The typed config of the ``gridcoarsen`` workload and its check, free of torch so that validating a
scenario does not import the solvers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

Equation = Literal["parabolic", "wave"]


def _default_equations() -> list[Equation]:  # a named factory: mypy infers a lambda's list as list[str]
    return ["parabolic", "wave"]
Variant = Literal["optimised", "kmeans", "random"]

# Fixed points of every grid (`testbed.workloads.gridcoarsen.problem`): the source first, then the
# sensors, at different distances and across the permeability pattern from it.
SOURCE = (0.3, 0.35)
SENSORS = ((0.55, 0.4), (0.3, 0.7), (0.7, 0.75))


class GridCoarsenConfig(StrictModel):
    """Fine problem, solvers, coarsening variant and the optimiser of the coarse points."""

    variant: Variant = "optimised"
    equations: list[Equation] = Field(default_factory=_default_equations)
    reductions: list[int] = Field(default_factory=lambda: [2, 5, 10], description="coarsening factors N_fine / N")
    side: int = Field(22, ge=6, le=60, description="fine grid: side x side stratified random points")
    contrast: float = Field(1.0, ge=0, description="log-permeability amplitude of the sinusoidal field")
    record_steps: int = Field(200, gt=0, description="sensor samples (output intervals) per rollout")
    parabolic_time: float = Field(0.1, gt=0, description="simulated time of the parabolic rollout")
    wave_time: float = Field(1.5, gt=0, description="simulated time of the wave rollout")
    ricker_frequency: float = Field(2.0, gt=0, description="peak frequency of the wave source")
    lr: float = Field(2e-3, gt=0, description="Adam step on the point coordinates (unit square)")

    @field_validator("equations")
    @classmethod
    def _distinct_equations(cls, equations: list[Equation]) -> list[Equation]:
        if not equations or len(set(equations)) != len(equations):
            raise ValueError("needs one or more distinct equations")
        return equations

    @field_validator("reductions")
    @classmethod
    def _reductions_above_one(cls, reductions: list[int]) -> list[int]:
        if not reductions or any(r < 2 for r in reductions) or len(set(reductions)) != len(reductions):
            raise ValueError("needs one or more distinct reduction factors, each >= 2")
        return sorted(reductions)


def check(config: GridCoarsenConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    fixed = len((SOURCE, *SENSORS))  # the points every coarse grid keeps
    smallest = config.side ** 2 // max(config.reductions)
    if smallest < fixed + 4:
        raise ScenarioError(f"workload.reductions: reduction {max(config.reductions)} leaves {smallest} coarse "
                            f"points of a {config.side}x{config.side} grid; needs at least "
                            f"{fixed + 4} (lower it or raise workload.side)")
