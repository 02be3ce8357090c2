"""Grid coarsening: differentiable Voronoi geometry, conservative solvers, masks, resume, config errors, core claim."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.workloads.gridcoarsen.geometry import geometry, topology
from testbed.workloads.gridcoarsen.solver import Physics, net_outflow, rollout, transmissibility
from testbed.workloads.runner import build_workload

# A small problem for the trained tests: 16x16 fine points, 10x coarser grids of 25 points.
SMALL = dict(side=16, reductions=[10], record_steps=100, parabolic_time=0.05, wave_time=1.2, lr=0.004)


def scenario(seed: int = 0, **workload):
    return validate_raw({"name": "t", "kind": "workload", "seed": seed, "data": {"dataset": "digits"},
                         "workload": {"name": "gridcoarsen", **workload}}, "s.yaml")


def random_points(n: int, seed: int = 0) -> torch.Tensor:
    return torch.tensor(np.random.default_rng(seed).uniform(0.02, 0.98, (n, 2)), dtype=torch.float64)


def test_gradcheck_of_cell_areas_and_edge_lengths():
    points = random_points(10).requires_grad_(True)
    topo = topology(points.detach().numpy())
    assert torch.autograd.gradcheck(lambda p: geometry(p, topo).areas, (points,))
    assert torch.autograd.gradcheck(lambda p: geometry(p, topo).edge_lengths, (points,))


@pytest.mark.parametrize("n", [5, 40, 300])
def test_cell_areas_sum_to_the_domain_area_and_match_sampling(n):
    points = random_points(n, seed=n)
    areas = geometry(points).areas
    assert float(areas.sum()) == pytest.approx(1.0, abs=1e-12)
    assert bool((areas > 0).all())
    samples = np.random.default_rng(1).random((100_000, 2))
    nearest = cKDTree(points.numpy()).query(samples)[1]
    assert np.allclose(np.bincount(nearest, minlength=n) / len(samples), areas.numpy(), atol=0.004)


def test_edge_lengths_of_a_regular_lattice_are_the_spacing():
    side = 4
    lattice = (np.stack(np.meshgrid(np.arange(side), np.arange(side)), -1).reshape(-1, 2) + 0.5) / side
    # A tiny jitter breaks the four-cocircular ties of the exact lattice (zero-length Voronoi edges).
    jitter = np.random.default_rng(0).normal(0, 1e-9, lattice.shape)
    geom = geometry(torch.tensor(lattice + jitter))
    long_edges = geom.edge_lengths[geom.edge_lengths > 1e-6]
    assert len(long_edges) == 2 * side * (side - 1)
    assert torch.allclose(long_edges, torch.tensor(1 / side, dtype=torch.float64), atol=1e-7)
    assert torch.allclose(geom.areas, torch.tensor(1 / side ** 2, dtype=torch.float64), atol=1e-7)


@pytest.mark.parametrize("equation", ["parabolic", "wave"])
def test_mass_is_conserved_without_a_source(equation):
    points = random_points(60, seed=3)
    geom = geometry(points)
    permeability = torch.exp(torch.randn(60, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    initial = torch.rand(60, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    physics = Physics(equation, 0.01 if equation == "wave" else 2e-4, 50)
    everywhere = torch.arange(60)
    curves = rollout(geom, permeability, torch.zeros(60, dtype=torch.float64), everywhere, physics, initial=initial)
    mass = curves @ geom.areas
    assert torch.allclose(mass, (initial * geom.areas).sum(), rtol=0, atol=1e-12)
    assert abs(float(net_outflow(initial, geom.edge_index, transmissibility(geom, permeability)).sum())) < 1e-12


def test_uniform_state_stays_uniform_and_source_raises_the_sensors_monotonically():
    points = random_points(60, seed=4)
    geom = geometry(points)
    permeability = torch.ones(60, dtype=torch.float64)
    physics = Physics("parabolic", 2e-4, 40)
    no_wells = torch.zeros(60, dtype=torch.float64)
    flat = rollout(geom, permeability, no_wells, torch.arange(60), physics, initial=torch.full((60,), 0.7,
                                                                                                 dtype=torch.float64))
    assert torch.allclose(flat, torch.tensor(0.7, dtype=torch.float64), rtol=0, atol=1e-14)
    wells = no_wells.clone()
    wells[0] = 1.0
    rising = rollout(geom, permeability, wells, torch.arange(60), physics)
    assert bool((rising.diff(dim=0) >= 0).all()) and float(rising[-1, 0]) > 0


def test_training_moves_only_free_points_and_keeps_them_in_the_square():
    workload = build_workload(scenario(**{**SMALL, "record_steps": 40}))
    before = {eq: workload.model(eq, 10).points().detach().clone() for eq in ("parabolic", "wave")}
    workload.train(3)
    for eq, start in before.items():
        after = workload.model(eq, 10).points().detach()
        fixed = workload.fine.num_fixed
        assert torch.equal(after[-fixed:], start[-fixed:])
        assert not torch.equal(after[:-fixed], start[:-fixed])
        assert bool(((after >= 0) & (after <= 1)).all())


def test_baseline_variants_do_not_train_and_their_ratio_is_to_the_kmeans_grid():
    """Catches baselines whose points move in training, or a ratio that is not own error / k-means error (a
    k-means run divides k-means by itself; the random subsample must come out worse than k-means, as its
    separately computed errors say)."""
    workload = build_workload(scenario(**{**SMALL, "record_steps": 40, "variant": "random"}))
    points = {eq: workload.model(eq, 10).points().detach().clone() for eq in ("parabolic", "wave")}
    before = workload.evaluate()
    assert workload.train(2) == {}
    assert workload.evaluate() == before
    for eq, start in points.items():
        assert torch.equal(workload.model(eq, 10).points().detach(), start)
        assert torch.equal(workload.model(eq, 10).points(), workload.model(eq, 10, "random").points())
    ratios = [workload.loss_of(eq, 10, "random") / workload.loss_of(eq, 10, "kmeans") for eq in ("parabolic", "wave")]
    assert before["test_parabolic_ratio_x10"] == pytest.approx(ratios[0], rel=1e-9)
    assert before["test_worst_ratio"] == pytest.approx(max(ratios), rel=1e-9) and min(ratios) > 1.1


def test_optimised_ten_times_coarser_grid_halves_the_kmeans_error_for_both_equations():
    # The paper's claim, and this bar: at 10x, at most half the k-means grid's error. Calibrated at
    # this size over seeds 0, 1, 2 (40 iterations): optimised / k-means was 0.107, 0.092, 0.107
    # (parabolic) and 0.26, 0.21, 0.37 (wave); without the optimisation the ratio is 1.
    workload = build_workload(scenario(seed=0, **SMALL))
    workload.train(40)
    for eq in ("parabolic", "wave"):
        optimised = workload.loss_of(eq, 10)
        assert optimised <= 0.5 * workload.loss_of(eq, 10, "kmeans")
        assert optimised < workload.loss_of(eq, 10, "random")


@pytest.mark.parametrize("field, value", [("variant", "lloyd"), ("reductions", [1]), ("reductions", [100]),
                                          ("equations", ["heat"]), ("lr", -1.0), ("side", 3), ("record_steps", 0)])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ScenarioError, match=rf"workload\.{field}"):
        scenario(**{field: value})
