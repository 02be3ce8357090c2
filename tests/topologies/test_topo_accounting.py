"""Tests for the random-walk PNDP accountant and the local-DP loss."""

import numpy as np
import pytest

from testbed.topologies import (
    TopologyError,
    build_graph,
    clip_to_local,
    closed_form_tail_bound,
    harmonic_number,
    local_dp_loss,
    max_valid_order,
    metropolis_hastings,
    random_walk_graph_term,
    random_walk_pndp,
    simple_random_walk,
    walk_length,
)


def _mh(name, **params):
    return metropolis_hastings(build_graph(name, **params))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("hypercube", {"dim": 5}),
        ("davis_southern_women", {}),
        ("ring", {"n": 32}),
        ("florentine_families", {}),
        ("erdos_renyi", {"n": 40, "seed": 1}),
    ],
)
def test_closed_form_equals_finite_sum(name, params):
    # Prepare: T from the authors' rule, long enough for the tail to vanish
    w = _mh(name, **params)
    T = walk_length(w, sigma=1.0)

    # Execute
    closed = random_walk_pndp(w, T=T, sigma=1.0, alpha=2.0, method="closed_form")
    finite = random_walk_pndp(w, T=T, sigma=1.0, alpha=2.0, method="finite_sum")

    # Assert
    np.testing.assert_allclose(closed, finite, rtol=0, atol=1e-10)


def test_closed_form_differs_from_short_sum_by_at_most_the_tail_bound():
    # Prepare: a slow ring and a short walk, so the T -> infinity tail is visible
    w, T, n = _mh("ring", n=16), 20, 16

    # Execute
    gap = np.abs(random_walk_pndp(w, T=T, sigma=1.0, alpha=2.0)
                 - random_walk_pndp(w, T=T, sigma=1.0, alpha=2.0, method="finite_sum"))
    bound = 2.0 * (T / n) * closed_form_tail_bound(w, T)

    # Assert
    assert 1e-6 < gap.max() <= bound


@pytest.mark.parametrize(("n", "T", "sigma", "alpha"), [(8, 50, 1.0, 2.0), (32, 275, 2.5, 7.0)])
@pytest.mark.parametrize("method", ["closed_form", "finite_sum"])
def test_complete_graph_loss_is_alpha_T_H_T_over_sigma2_n2(n, T, sigma, alpha, method):
    # Prepare: reference computed with an explicit loop for H_T
    h_t = sum(1.0 / t for t in range(1, T + 1))
    expected = alpha * T * h_t / (sigma**2 * n**2)

    # Execute
    eps = random_walk_pndp(_mh("complete", n=n), T=T, sigma=sigma, alpha=alpha, method=method)

    # Assert
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(eps[off], expected, rtol=1e-12)
    assert np.all(np.diag(eps) == 0)


def test_loss_scales_as_one_over_sigma_squared_and_with_alpha_and_sensitivity():
    w = _mh("karate_club")

    base = random_walk_pndp(w, T=200, sigma=1.0, alpha=2.0)
    scaled = random_walk_pndp(w, T=200, sigma=3.0, alpha=5.0, sensitivity=2.0)

    np.testing.assert_allclose(scaled, base * (5.0 / 2.0) * 4.0 / 9.0, rtol=1e-12)


def test_loss_scales_linearly_with_contributions():
    w = _mh("grid", rows=4, cols=5)

    default = random_walk_pndp(w, T=300, sigma=1.0, alpha=2.0, method="finite_sum")
    tripled = random_walk_pndp(
        w, T=300, sigma=1.0, alpha=2.0, method="finite_sum", contributions=3 * 300 / 20
    )

    np.testing.assert_allclose(tripled, 3 * default, rtol=1e-12)


def test_closed_form_is_exactly_T_over_sigma2_times_a_T_free_graph_term_plus_stationary_term():
    # Prepare: eps = (alpha T / sigma^2 n) [H_T / n + L]; L does not depend on T
    w, n, alpha, sigma = _mh("les_miserables"), 77, 2.0, 1.5

    # Execute
    graph_part = {T: random_walk_pndp(w, T=T, sigma=sigma, alpha=alpha)
                  - alpha * T * harmonic_number(T) / (sigma**2 * n**2) for T in (500, 1000)}

    # Assert
    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(graph_part[1000][off], 2 * graph_part[500][off], rtol=1e-10)
    expected = alpha * 500 / (sigma**2 * n) * random_walk_graph_term(w)
    np.testing.assert_allclose(graph_part[500][off], expected[off], rtol=1e-10)


@pytest.mark.parametrize("method", ["closed_form", "finite_sum"])
def test_symmetric_walk_gives_symmetric_loss(method):
    w = _mh("small_world", n=40, k=4, p=0.3, seed=2)

    eps = random_walk_pndp(w, T=400, sigma=1.0, alpha=2.0, method=method)

    np.testing.assert_allclose(eps, eps.T, rtol=0, atol=1e-12)
    assert eps.min() >= -1e-12


def test_closer_nodes_leak_more_on_the_hypercube():
    eps = random_walk_pndp(_mh("hypercube", dim=5), T=275, sigma=1.0, alpha=2.0)

    assert eps[0, 1] > eps[0, 3] > eps[0, 7] > eps[0, 31]  # distances 1, 2, 3, 5 from node 0


def test_sources_select_rows():
    w = _mh("karate_club")

    full = random_walk_pndp(w, T=150, sigma=1.0, alpha=2.0, method="finite_sum")
    rows = random_walk_pndp(w, T=150, sigma=1.0, alpha=2.0, method="finite_sum", sources=[5, 0])

    np.testing.assert_allclose(rows, full[[5, 0]], atol=1e-14)
    assert rows[0, 5] == 0 and rows[1, 0] == 0


def test_non_symmetric_walk_needs_finite_sum_and_non_doubly_stochastic_needs_contributions():
    # Prepare
    shift = 0.5 * np.eye(6) + 0.5 * np.roll(np.eye(6), 1, axis=1)
    degree_walk = simple_random_walk(build_graph("karate_club"))

    # Execute / Assert
    with pytest.raises(TopologyError, match="not symmetric"):
        random_walk_pndp(shift, T=10, sigma=1.0, alpha=2.0)
    assert random_walk_pndp(shift, T=10, sigma=1.0, alpha=2.0, method="finite_sum")[0, 1] > 0
    with pytest.raises(TopologyError, match="column"):
        random_walk_pndp(degree_walk, T=10, sigma=1.0, alpha=2.0, method="finite_sum")
    eps = random_walk_pndp(
        degree_walk, T=10, sigma=1.0, alpha=2.0, method="finite_sum", contributions=1.0
    )
    assert eps.max() > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"T": 0}, "T must be >= 1"),
        ({"sigma": 0.0}, "sigma"),
        ({"alpha": 1.0}, "alpha"),
        ({"method": "magic"}, "unknown method"),
    ],
)
def test_bad_accounting_parameters_are_refused(kwargs, message):
    params = {"T": 10, "sigma": 1.0, "alpha": 2.0} | kwargs

    with pytest.raises(TopologyError, match=message):
        random_walk_pndp(_mh("ring", n=5), **params)


def test_harmonic_number_matches_direct_sum():
    for T in (1, 2, 10, 275, 6775):
        assert harmonic_number(T) == pytest.approx(sum(1.0 / t for t in range(1, T + 1)), rel=1e-14)


def test_local_dp_loss_and_clipping():
    local = local_dp_loss(alpha=2.0, sigma=1.0, releases=3)
    eps = random_walk_pndp(_mh("ring", n=8), T=800, sigma=1.0, alpha=2.0)

    assert local == pytest.approx(3.0)
    assert clip_to_local(eps, 1.0).max() == 1.0 and eps.max() > 1.0


def test_max_valid_order_solves_the_weak_convexity_condition():
    alpha = max_valid_order(sigma=2.0, sensitivity=0.5)

    assert alpha * (alpha - 1) == pytest.approx(2 * 2.0**2 / 0.5**2)


def test_closed_form_runs_at_n_512():
    w = metropolis_hastings(build_graph("hypercube", dim=9), sparse=True)

    eps = random_walk_pndp(w, T=1000, sigma=1.0, alpha=2.0)

    assert eps.shape == (512, 512) and np.all(np.isfinite(eps))
    assert eps[0, 1] > eps[0, 511] > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sources": [0, 99]}, "sources must be node ids"),
        ({"contributions": -1.0}, "contributions"),
        ({"contributions": [1.0, 2.0]}, "contributions"),
    ],
)
def test_bad_sources_and_contributions_are_refused(kwargs, message):
    with pytest.raises(TopologyError, match=message):
        random_walk_pndp(_mh("ring", n=5), T=10, sigma=1.0, alpha=2.0, **kwargs)
