"""The flood data set: 9 real terrain regions x N simulated storms, the region/event split, and graph batches.

The relief of each crop is scaled by ``relief_scale`` about its lowest cell: the paper's
watersheds are flat coastal plain, the bundled DEM a steep ridge-and-valley landscape.
Depth and rain are kept in metres and moved to the paper's transformed space
log(1 + x / 0.01) / 10 for the models (the metrics scale it back by 10, as the authors' code
does: `testbed.workloads.floodgnn.metrics`). Elevation is standardised per region.

Split as in the paper (a few training combinations, the rest for testing, some regions and some
storms never seen): ``heldout_regions`` regions and ``heldout_events`` storms are held out; the
training combinations are drawn from the seen regions x seen storms; the headline test set is
held-out regions x held-out storms.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np
import torch

from testbed.workloads.floodgnn.hydraulics import Storm, random_storm, simulate
from testbed.workloads.floodgnn.terrain import CELL_SIZE_M, REGIONS, d8_edges, regions

SCALE_M = 0.01


def transform(metres: torch.Tensor) -> torch.Tensor:
    """The paper's transform of depth and rain, log(1 + x / 0.01) / 10."""
    return torch.log1p(metres / SCALE_M) / 10


def untransform(value: torch.Tensor) -> torch.Tensor:
    return torch.expm1(10 * value) * SCALE_M


@lru_cache(maxsize=4)
def _simulated(region_size: int, relief_scale: float, storms: tuple[Storm, ...], steps: int, interval_min: float):
    # Deterministic in its arguments, so runs and tests in one process share the simulation.
    crops = np.stack([crop.min() + relief_scale * (crop - crop.min()) for crop in regions(region_size)])
    elevation = np.repeat(crops, len(storms), axis=0)
    members = [[storm] for _ in crops for storm in storms]
    depth, rain = simulate(elevation, members, steps, interval_min, CELL_SIZE_M)
    shape = (len(crops), len(storms), steps, region_size * region_size)
    return crops, depth.reshape(shape), rain.reshape(shape)


@dataclass
class Batch:
    """Several (region, storm) combinations as one disjoint graph: rain and depth are (T x nodes)."""

    combos: list[tuple[int, int]]
    elevation: torch.Tensor
    edges: torch.Tensor
    rain: torch.Tensor
    depth: torch.Tensor
    rain_m: torch.Tensor
    depth_m: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        """This batch with its tensors on ``device``."""
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self) if f.name != "combos"})


class FloodData:
    """Terrain, D8 graphs, simulated depth and rain for every region x storm, and the split."""

    def __init__(self, region_size: int, relief_scale: float, events: int, steps: int, interval_min: float,
                 heldout_regions: int, heldout_events: int, train_combos: int, rng: np.random.Generator,
                 storm_radius: tuple[float, float], background_rain: float):
        storms = tuple(random_storm(rng, steps * interval_min, storm_radius, background_rain) for _ in range(events))
        crops, self.depth_m, self.rain_m = _simulated(region_size, relief_scale, storms, steps, interval_min)
        self.storms, self.crops = storms, crops
        self.edges = [torch.as_tensor(d8_edges(crop)) for crop in crops]
        flat = crops.reshape(len(crops), -1)
        self.elevation = torch.as_tensor((flat - flat.mean(1, keepdims=True)) / flat.std(1, keepdims=True))
        region_order, event_order = rng.permutation(REGIONS), rng.permutation(events)
        self.heldout_region_ids = sorted(region_order[:heldout_regions].tolist())
        self.heldout_event_ids = sorted(event_order[:heldout_events].tolist())
        seen = [(r, e) for r in sorted(region_order[heldout_regions:].tolist())
                for e in sorted(event_order[heldout_events:].tolist())]
        chosen = rng.choice(len(seen), min(train_combos, len(seen)), replace=False)
        self.train = sorted(seen[i] for i in chosen)
        self.heldout = [(r, e) for r in self.heldout_region_ids for e in self.heldout_event_ids]
        self.unseen = [(r, e) for r in range(REGIONS) for e in range(events) if (r, e) not in self.train]

    def batch(self, combos: list[tuple[int, int]]) -> Batch:
        """The combinations stacked as one graph (node offsets added to each region's edges)."""
        nodes = self.elevation.shape[1]
        edges = torch.cat([self.edges[r] + i * nodes for i, (r, _) in enumerate(combos)])
        rain_m = torch.as_tensor(np.concatenate([self.rain_m[r, e] for r, e in combos], axis=1))
        depth_m = torch.as_tensor(np.concatenate([self.depth_m[r, e] for r, e in combos], axis=1))
        elevation = torch.cat([self.elevation[r] for r, _ in combos])
        return Batch(list(combos), elevation, edges, transform(rain_m), transform(depth_m), rain_m, depth_m)
