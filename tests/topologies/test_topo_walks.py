"""Tests for transition matrices, walk checks and spectral quantities."""

import networkx as nx
import numpy as np
import pytest

from testbed.topologies import (
    TopologyError,
    build_graph,
    eigenvalues,
    lazy_walk,
    metropolis_hastings,
    mixing_time,
    period,
    simple_random_walk,
    spectral_gap,
    stationary_distribution,
    validate_walk,
    walk_length,
)


def test_metropolis_weights_follow_max_degree_rule():
    # Prepare
    graph = build_graph("karate_club")
    deg = dict(graph.degree())

    # Execute
    w = metropolis_hastings(graph)

    # Assert
    for u, v in graph.edges():
        assert w[u, v] == pytest.approx(1.0 / (1 + max(deg[u], deg[v])), abs=1e-15)
    non_edges = ~(nx.to_numpy_array(graph, weight=None).astype(bool) | np.eye(34, dtype=bool))
    assert np.all(w[non_edges] == 0)
    np.testing.assert_allclose(w, w.T, atol=0)
    np.testing.assert_allclose(w.sum(axis=0), 1, atol=1e-14)
    np.testing.assert_allclose(w.sum(axis=1), 1, atol=1e-14)


def test_metropolis_on_complete_graph_is_uniform_averaging():
    w = metropolis_hastings(build_graph("complete", n=9))

    np.testing.assert_allclose(w, np.full((9, 9), 1 / 9), atol=1e-15)


def test_sparse_and_dense_metropolis_agree():
    graph = build_graph("torus", rows=4, cols=5)

    sparse = metropolis_hastings(graph, sparse=True)

    np.testing.assert_array_equal(sparse.toarray(), metropolis_hastings(graph))


def test_simple_walk_stationary_law_is_proportional_to_degree():
    graph = build_graph("karate_club")
    deg = np.array([d for _, d in sorted(graph.degree())], dtype=float)

    pi = stationary_distribution(simple_random_walk(graph))

    np.testing.assert_allclose(pi, deg / deg.sum(), atol=1e-12)


def test_simple_walk_on_bipartite_graph_is_refused_as_periodic():
    walk = simple_random_walk(build_graph("ring", n=6))

    assert period(walk) == 2
    with pytest.raises(TopologyError, match=r"periodic \(period 2\)"):
        validate_walk(walk)
    validate_walk(lazy_walk(walk))  # the lazy walk is aperiodic


def test_period_of_directed_three_cycle_is_three():
    cycle = np.roll(np.eye(3), 1, axis=1)

    assert period(cycle) == 3


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (np.array([[0.5, 0.4], [0.5, 0.5]]), "row 0 sums to 0.9"),
        (np.array([[1.5, -0.5], [0.5, 0.5]]), "negative entry"),
        (np.ones((2, 3)) / 3, "square"),
        (np.array([[np.nan, 1.0], [0.5, 0.5]]), "non-finite"),
    ],
)
def test_non_stochastic_matrix_is_refused(matrix, message):
    with pytest.raises(TopologyError, match=message):
        validate_walk(matrix)


def test_disconnected_walk_is_refused():
    block = metropolis_hastings(build_graph("ring", n=4))
    two = np.block([[block, np.zeros((4, 4))], [np.zeros((4, 4)), block]])

    with pytest.raises(TopologyError, match=r"disconnected \(2 components\)"):
        validate_walk(two)


def test_doubly_stochastic_and_symmetric_checks():
    # Prepare
    degree_walk = simple_random_walk(build_graph("karate_club"))  # irregular: columns != 1
    # doubly stochastic, not symmetric
    shift = 0.5 * np.eye(4) + 0.5 * np.roll(np.eye(4), 1, axis=1)

    # Execute / Assert
    with pytest.raises(TopologyError, match="column"):
        validate_walk(degree_walk, doubly_stochastic=True)
    with pytest.raises(TopologyError, match="not symmetric"):
        validate_walk(shift, symmetric=True)
    validate_walk(shift, doubly_stochastic=True)


def test_hypercube_spectrum_and_walk_length_match_known_values():
    w = metropolis_hastings(build_graph("hypercube", dim=5))

    values = np.unique(np.round(eigenvalues(w), 10))

    np.testing.assert_allclose(values, [-2 / 3, -1 / 3, 0, 1 / 3, 2 / 3, 1], atol=1e-10)
    assert spectral_gap(w) == pytest.approx(1 / 3, abs=1e-12)
    assert walk_length(w, sigma=1.0) == 275  # Table 2 of PN-f-DP: T = 275 for this graph


def test_ring_gap_matches_circulant_formula():
    n = 12
    w = metropolis_hastings(build_graph("ring", n=n))

    expected = 1 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / n))  # eigenvalues 1/3 + 2/3 cos(2 pi k/n)

    assert spectral_gap(w) == pytest.approx(expected, abs=1e-12)
    assert spectral_gap(w, absolute=True) == pytest.approx(expected, abs=1e-12)


def test_reversible_walk_spectrum_matches_general_eigensolver():
    walk = simple_random_walk(build_graph("florentine_families"))
    walk = lazy_walk(walk, 0.1)

    general = np.sort(np.linalg.eigvals(walk).real)[::-1]

    np.testing.assert_allclose(eigenvalues(walk), general, atol=1e-10)


def test_non_reversible_walk_has_no_spectral_gap_here():
    shift = 0.5 * np.eye(5) + 0.5 * np.roll(np.eye(5), 1, axis=1)

    with pytest.raises(TopologyError, match="not reversible"):
        spectral_gap(shift)


@pytest.mark.parametrize(
    ("name", "params"), [("ring", {"n": 10}), ("karate_club", {}), ("grid", {"rows": 3, "cols": 4})]
)
def test_mixing_time_bound_dominates_exact_mixing_time(name, params):
    w = metropolis_hastings(build_graph(name, **params))

    exact, bound = mixing_time(w, exact=True), mixing_time(w)

    assert 1 <= exact <= bound


def test_complete_graph_mixes_in_one_step():
    assert mixing_time(metropolis_hastings(build_graph("complete", n=7)), exact=True) == 1


def test_mixing_time_rejects_bad_eps():
    with pytest.raises(TopologyError, match="eps"):
        mixing_time(np.full((3, 3), 1 / 3), eps=1.5)


def test_transition_matrix_of_disconnected_graph_is_refused():
    graph = nx.Graph([(0, 1), (2, 3), (3, 4)])

    with pytest.raises(TopologyError, match=r"graph 'unnamed' is disconnected \(2 components\)"):
        metropolis_hastings(graph)


@pytest.mark.integration
def test_large_sparse_walks_take_the_lanczos_path_and_match_the_dense_spectrum():
    from testbed.topologies import build_graph
    from testbed.topologies.spectral import SPARSE_SPECTRUM_FROM, eigenvalues

    walk = metropolis_hastings(build_graph("erdos_renyi", n=SPARSE_SPECTRUM_FROM, seed=3), sparse=True)
    dense = eigenvalues(walk)
    assert spectral_gap(walk) == pytest.approx(1 - dense[1], abs=1e-10)
    assert spectral_gap(walk, absolute=True) == pytest.approx(1 - max(dense[1], abs(dense[-1])), abs=1e-10)
