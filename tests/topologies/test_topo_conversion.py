"""Tests for RDP -> (epsilon, delta) conversions and epsilon by graph distance."""

import networkx as nx
import numpy as np
import pytest
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as opacus_rdp

from testbed.topologies import (
    TopologyError,
    epsilon_by_distance,
    linear_rdp_to_dp,
    rdp_to_dp,
    zcdp_to_dp,
)

INTEGER_ORDERS = list(range(2, 65))


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-6])
def test_single_gaussian_matches_opacus_at_integer_orders(sigma, delta):
    # Prepare: opacus accounts one full-batch Gaussian step itself
    accountant = RDPAccountant()
    accountant.step(noise_multiplier=sigma, sample_rate=1.0)
    rdp = [a / (2 * sigma**2) for a in INTEGER_ORDERS]

    # Execute
    ours = rdp_to_dp(rdp, INTEGER_ORDERS, delta, method="balle")
    theirs = accountant.get_privacy_spent(delta=delta, alphas=INTEGER_ORDERS)

    # Assert
    assert ours[0] == pytest.approx(theirs[0], rel=1e-12)
    assert ours[1] == theirs[1]


def test_gaussian_rdp_curve_is_alpha_over_two_sigma_squared_in_opacus():
    rdp = opacus_rdp.compute_rdp(q=1.0, noise_multiplier=1.3, steps=1, orders=INTEGER_ORDERS)

    np.testing.assert_allclose(rdp, np.array(INTEGER_ORDERS) / (2 * 1.3**2), rtol=1e-12)


def test_default_opacus_orders_reproduce_reference_value():
    # Reference from the project notes (opacus 1.6.0): sigma = 1, delta = 1e-5 -> 4.728507
    orders = RDPAccountant.DEFAULT_ALPHAS

    eps, _ = rdp_to_dp([a / 2 for a in orders], orders, 1e-5)

    assert eps == pytest.approx(4.728507, abs=1e-6)


def test_mironov_with_optimal_order_equals_zcdp_formula():
    rho = np.array([0.5, 0.01, 3.0])

    eps, order = linear_rdp_to_dp(rho, 1e-5, method="mironov")

    np.testing.assert_allclose(eps, zcdp_to_dp(rho, 1e-5), rtol=1e-12)
    np.testing.assert_allclose(order, 1 + np.sqrt(np.log(1e5) / rho), rtol=1e-12)
    assert zcdp_to_dp(0.5, 1e-5) == pytest.approx(5.298526, abs=1e-6)


@pytest.mark.parametrize("rho", [1e-7, 1e-3, 0.5, 1.0, 40.0, 1e4])
def test_continuous_balle_order_is_the_brute_force_minimum(rho):
    # Prepare: a dense order grid as the independent reference
    grid = 1 + np.logspace(-8, 8, 400_001)
    reference = np.min(rho * grid + (np.log(1e6) - np.log(grid)) / (grid - 1) + np.log1p(-1 / grid))

    # Execute
    eps, _ = linear_rdp_to_dp(np.array([rho]), 1e-6)

    # Assert
    assert eps[0] <= reference + 1e-12
    assert eps[0] == pytest.approx(reference, rel=1e-7)


def test_continuous_balle_never_exceeds_grid_conversions():
    rho = np.logspace(-4, 2, 50)
    orders = RDPAccountant.DEFAULT_ALPHAS

    eps, _ = linear_rdp_to_dp(rho, 1e-5)
    grid = [rdp_to_dp([a * r for a in orders], orders, 1e-5)[0] for r in rho]
    mironov, _ = linear_rdp_to_dp(rho, 1e-5, method="mironov")

    assert np.all(eps <= np.array(grid) + 1e-12)
    assert np.all(eps < mironov)


def test_max_order_caps_the_order_and_raises_epsilon():
    rho = np.array([1e-4])

    free, free_order = linear_rdp_to_dp(rho, 1e-5)
    capped, capped_order = linear_rdp_to_dp(rho, 1e-5, max_order=10.0)

    assert free_order[0] > 10.0 and capped_order[0] == 10.0
    assert capped[0] == pytest.approx(rdp_to_dp([10.0 * 1e-4], [10.0], 1e-5)[0], rel=1e-12)
    assert capped[0] > free[0]


def test_zero_leakage_converts_to_zero_epsilon():
    eps, order = linear_rdp_to_dp(np.zeros((2, 2)), 1e-5)

    assert np.all(eps == 0) and np.all(np.isinf(order))


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5])
def test_bad_delta_is_refused(delta):
    with pytest.raises(TopologyError, match="delta"):
        linear_rdp_to_dp(np.array([0.1]), delta)


def test_bad_orders_are_refused():
    with pytest.raises(TopologyError, match="order"):
        rdp_to_dp([0.1, 0.2], [1.0, 2.0], 1e-5)


def test_epsilon_by_distance_on_a_path():
    # Prepare: eps[u, v] = 10 * d(u, v) + u on the path 0-1-2-3
    graph = nx.path_graph(4)
    dist = np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
    eps = 10.0 * dist + np.arange(4)[:, None]

    # Execute
    profile = epsilon_by_distance(eps, graph)

    # Assert
    np.testing.assert_array_equal(profile.distance, [1, 2, 3])
    np.testing.assert_array_equal(profile.count, [6, 4, 2])
    np.testing.assert_allclose(profile.mean, [10 + 9 / 6, 20 + 6 / 4, 30 + 3 / 2])
    np.testing.assert_allclose(profile.minimum, [10, 20, 30])
    np.testing.assert_allclose(profile.maximum, [13, 23, 33])


def test_epsilon_by_distance_from_selected_sources():
    graph = nx.path_graph(4)
    rows = np.array([[0.0, 1.0, 2.0, 3.0]])

    profile = epsilon_by_distance(rows, graph, sources=[3])

    np.testing.assert_array_equal(profile.distance, [1, 2, 3])
    np.testing.assert_allclose(profile.mean, [2.0, 1.0, 0.0])
    with pytest.raises(TopologyError, match="shape"):
        epsilon_by_distance(rows, graph)


def test_chunked_processing_gives_the_same_results(monkeypatch):
    # Prepare: a small block size forces many chunks and source blocks
    import testbed.topologies.conversion as conversion

    graph = nx.karate_club_graph()
    eps = np.random.default_rng(0).random((34, 34))
    rho = np.random.default_rng(1).random((5, 7)) * 10
    whole = epsilon_by_distance(eps, graph), linear_rdp_to_dp(rho, 1e-5)

    # Execute
    monkeypatch.setattr(conversion, "CHUNK", 7)
    chunked = epsilon_by_distance(eps, graph), linear_rdp_to_dp(rho, 1e-5)

    # Assert
    for field in ("distance", "mean", "minimum", "maximum", "count"):
        np.testing.assert_allclose(getattr(chunked[0], field), getattr(whole[0], field), rtol=1e-14)
    np.testing.assert_array_equal(chunked[1][0], whole[1][0])


def test_infinite_or_undefined_rdp_gives_infinite_epsilon():
    infinite = rdp_to_dp([np.inf, np.inf], [2.0, 3.0], 1e-5)
    undefined = rdp_to_dp([np.nan, np.nan], [2.0, 3.0], 1e-5)

    assert infinite[0] == np.inf
    assert undefined[0] == np.inf and np.isnan(undefined[1])
