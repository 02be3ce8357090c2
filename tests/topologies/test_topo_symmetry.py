"""Translation symmetry of the Cayley-graph builders (topologies.symmetry): one row gives the matrix."""

import numpy as np
import pytest

from testbed.topologies import build_graph, metropolis_hastings
from testbed.topologies.symmetry import full_matrix, row_symmetry

SYMMETRIC = [("hypercube", {"dim": 4}), ("ring", {"n": 7}), ("complete", {"n": 6}), ("torus", {"rows": 3, "cols": 4})]


@pytest.mark.parametrize(("name", "params"), SYMMETRIC)
def test_every_row_of_a_walk_power_sum_is_row_zero_translated(name, params):
    graph = build_graph(name, **params)
    walk = metropolis_hastings(graph)
    difference = row_symmetry(graph, walk)
    assert difference is not None
    # any function of W built from powers shares the symmetry: W + W^2 / 2 + W^3 / 3
    powers = [np.linalg.matrix_power(walk, s) / s for s in (1, 2, 3)]
    target = sum(powers)
    np.testing.assert_allclose(full_matrix(target[0], difference), target, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("name", "params"), [("grid", {"rows": 3, "cols": 4}), ("erdos_renyi", {"n": 20, "seed": 1})])
def test_graphs_without_a_translation_group_get_none(name, params):
    graph = build_graph(name, **params)
    assert row_symmetry(graph, metropolis_hastings(graph)) is None


def test_a_walk_whose_weights_break_the_symmetry_falls_back():
    graph = build_graph("hypercube", dim=4)
    walk = metropolis_hastings(graph)
    walk[[0, 1], [1, 0]] += 0.01  # still symmetric, no longer invariant under the translations
    walk[[0, 1], [0, 1]] -= 0.01
    assert row_symmetry(graph, walk) is None


@pytest.mark.parametrize("dim", [2, 3, 6])
def test_the_integer_hypercube_is_networkx_hypercube_sorted(dim):
    import networkx as nx

    from testbed.topologies._checks import finish_graph

    built, reference = build_graph("hypercube", dim=dim), finish_graph(nx.hypercube_graph(dim), "h", ordering="sorted")
    assert {frozenset(e) for e in built.edges()} == {frozenset(e) for e in reference.edges()}
    assert [built.nodes[i]["label"] for i in built] == [reference.nodes[i]["label"] for i in reference]
