"""The typed config of the ``floodgnn`` workload and its check, free of torch so that validating a
scenario does not import the models or the DEM."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from testbed.config import StrictModel
from testbed.errors import ScenarioError

if TYPE_CHECKING:
    from testbed.data.config import DataConfig

# The real DEM bundled with matplotlib, and the 3 x 3 layout of regions it is cut into
# (`testbed.workloads.floodgnn.terrain`).
DEM_FILE = "jacksboro_fault_dem.npz"
REGIONS = 9

Variant = Literal["comgnn", "mpnn", "rainincr"]


class FloodGNNConfig(StrictModel):
    """Regions and storms, the split, the model and its optimiser."""

    variant: Variant = "comgnn"
    region_size: int = Field(16, ge=6, description="cells per side of each of the 9 DEM regions")
    relief_scale: float = Field(0.1, gt=0, le=1, description="terrain relief multiplier (flat-plain watersheds)")
    events: int = Field(7, ge=2, description="simulated storms")
    storm_radius: tuple[float, float] = Field(
        (0.1, 0.25), description="bounds of each storm's rain-cell radius, in region sides")
    background_rain: float = Field(0.0, ge=0, le=1, description=(
        "upper bound of the share of the peak that falls on every cell (0: local storms that leave dry "
        "ground, so CSI can tell a model from the all-wet prediction)"))
    heldout_regions: int = Field(3, ge=1, le=REGIONS - 1)
    heldout_events: int = Field(3, ge=1)
    train_combos: int = Field(9, ge=1, description="training (region, storm) combinations")
    rollout_steps: int = Field(40, ge=1, description="autoregressive steps of interval_min minutes")
    interval_min: float = Field(5.0, gt=0)
    horizons: list[int] = Field(default_factory=lambda: [20, 40], description="steps the metrics are taken at")
    hidden: int = Field(32, ge=4, description="ComGNN width; the mpnn baseline is matched in parameters")
    blocks: int = Field(2, ge=1, description="message-passing blocks per step")
    lr: float = Field(3e-3, gt=0)
    grad_clip: float = Field(1.0, gt=0, description="clip each gradient value (the paper's setting)")

    @field_validator("horizons")
    @classmethod
    def _positive_horizons(cls, horizons: list[int]) -> list[int]:
        if not horizons or any(h < 1 for h in horizons):
            raise ValueError("needs one or more horizons, each >= 1")
        return sorted(set(horizons))

    @field_validator("storm_radius")
    @classmethod
    def _ordered_radius(cls, radius: tuple[float, float]) -> tuple[float, float]:
        if not 0 < radius[0] <= radius[1]:
            raise ValueError("needs 0 < low <= high (region sides)")
        return radius


def check(config: FloodGNNConfig, data: DataConfig) -> None:
    """Reject config/data combinations that cannot work."""
    from matplotlib import cbook  # imported on use: the schema never loads matplotlib

    # matplotlib's stub omits the NpzFile that an .npz sample opens as
    dem_rows, dem_cols = cbook.get_sample_data(DEM_FILE)["elevation"].shape  # type: ignore[index]
    if config.region_size > min(dem_rows, dem_cols) // 3:
        raise ScenarioError(f"workload.region_size: {config.region_size} exceeds a ninth of the "
                            f"{dem_rows}x{dem_cols} DEM (at most {min(dem_rows, dem_cols) // 3})")
    if max(config.horizons) > config.rollout_steps:
        raise ScenarioError(f"workload.horizons: horizon {max(config.horizons)} is past the rollout of "
                            f"{config.rollout_steps} steps")
    if config.heldout_events >= config.events:
        raise ScenarioError(f"workload.heldout_events: {config.heldout_events} of {config.events} storms "
                            "leaves none to train on")
