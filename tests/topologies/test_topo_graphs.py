"""Tests for the graph builders and the registry (topologies.graphs, real_graphs)."""

import networkx as nx
import pytest

from testbed.topologies import GRAPH_BUILDERS, TopologyError, build_graph, graph_from_spec
from testbed.topologies.graphs import erdos_renyi

RANDOM_SPECS = {
    "erdos_renyi": {"n": 60},
    "random_geometric": {"n": 60, "radius": 0.3},
    "small_world": {"n": 60, "k": 4, "p": 0.2},
}


def _edge_set(graph):
    return {frozenset(e) for e in graph.edges()}


@pytest.mark.parametrize(
    ("name", "params", "nodes", "edges"),
    [
        ("complete", {"n": 6}, 6, 15),
        ("ring", {"n": 7}, 7, 7),
        ("grid", {"rows": 3, "cols": 4}, 12, 17),
        ("torus", {"rows": 3, "cols": 4}, 12, 24),
        ("hypercube", {"dim": 4}, 16, 32),
        ("exponential", {"n": 8}, 8, 20),
        ("karate_club", {}, 34, 78),
        ("davis_southern_women", {}, 32, 89),
        ("florentine_families", {}, 15, 20),
        ("les_miserables", {}, 77, 254),
    ],
)
def test_deterministic_builders_have_expected_size(name, params, nodes, edges):
    # Execute
    graph = build_graph(name, **params)

    # Assert
    assert graph.number_of_nodes() == nodes
    assert graph.number_of_edges() == edges
    assert sorted(graph.nodes()) == list(range(nodes))
    assert nx.is_connected(graph) and nx.number_of_selfloops(graph) == 0
    assert graph.graph["name"] == name


def test_hypercube_neighbours_differ_in_exactly_one_bit():
    graph = build_graph("hypercube", dim=5)

    diffs = [u ^ v for u, v in graph.edges()]

    assert all(d > 0 and d & (d - 1) == 0 for d in diffs)


def test_exponential_graph_links_powers_of_two_hops():
    graph = build_graph("exponential", n=16)

    hops = {min((v - u) % 16, (u - v) % 16) for u, v in graph.edges()}

    assert hops == {1, 2, 4, 8}
    assert all(d == 7 for _, d in graph.degree())


def test_real_graph_keeps_original_labels():
    graph = build_graph("davis_southern_women")

    assert graph.nodes[0]["label"] == "Evelyn Jefferson"


@pytest.mark.parametrize("name", sorted(RANDOM_SPECS))
def test_random_builders_are_deterministic_per_seed(name):
    # Prepare
    params = RANDOM_SPECS[name]

    # Execute
    first, again = build_graph(name, seed=3, **params), build_graph(name, seed=3, **params)
    other = build_graph(name, seed=4, **params)

    # Assert
    assert _edge_set(first) == _edge_set(again)
    assert _edge_set(first) != _edge_set(other)
    assert nx.is_connected(first)


def test_random_builder_requires_explicit_seed():
    with pytest.raises(TypeError):
        erdos_renyi(n=20)


def test_disconnected_random_graph_is_refused():
    message = r"graph 'erdos_renyi' is disconnected \(\d+ components\)"
    with pytest.raises(TopologyError, match=message):
        build_graph("erdos_renyi", n=50, p=0.01, seed=0, max_tries=3)


def test_edge_list_reads_sorts_and_ignores_comments(tmp_path):
    # Prepare
    path = tmp_path / "g.txt"
    path.write_text("# header\n10 2 0.5\n2,3\n\n3 10  # closing the triangle\n3 3\n10 11\n")

    # Execute
    graph = build_graph("edge_list", path=str(path))

    # Assert: nodes 2, 3, 10, 11 sorted numerically; self-loop dropped
    assert [graph.nodes[i]["label"] for i in range(4)] == [2, 3, 10, 11]
    assert _edge_set(graph) == {frozenset(e) for e in [(0, 1), (1, 2), (0, 2), (2, 3)]}


def test_edge_list_refuses_disconnected_file(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("a b\nc d\n")

    with pytest.raises(TopologyError, match=r"is disconnected \(2 components\)"):
        build_graph("edge_list", path=path)


def test_edge_list_names_bad_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("1 2\n3\n")

    with pytest.raises(TopologyError, match="line 2"):
        build_graph("edge_list", path=path)


def test_edge_list_missing_file(tmp_path):
    with pytest.raises(TopologyError, match="does not exist"):
        build_graph("edge_list", path=tmp_path / "nope.txt")


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nonsense", {}, "unknown graph 'nonsense'"),
        ("hypercube", {"n": 3}, "graph 'hypercube'"),
        ("hypercube", {"dim": 2.5}, "dim must be an integer"),
        ("ring", {"n": 2}, "n must be >= 3"),
        ("small_world", {"n": 10, "k": 10}, "k < n"),
        ("erdos_renyi", {"n": 10, "p": 1.5}, "probability"),
    ],
)
def test_bad_parameters_raise_topology_error(name, params, message):
    with pytest.raises(TopologyError, match=message):
        build_graph(name, seed=0, **params)


def test_graph_from_spec_uses_name_and_seed_from_mapping():
    spec = {"name": "erdos_renyi", "n": 40, "seed": 7}

    graph = graph_from_spec(spec, seed=0)

    assert _edge_set(graph) == _edge_set(build_graph("erdos_renyi", n=40, seed=7))
    assert graph_from_spec({"name": "hypercube", "dim": 3}).number_of_nodes() == 8


def test_graph_from_spec_without_name_is_refused():
    with pytest.raises(TopologyError, match="no 'name'"):
        graph_from_spec({"dim": 3})


def test_registry_lists_every_required_topology():
    required = {"complete", "ring", "grid", "torus", "hypercube", "exponential", "erdos_renyi",
                "random_geometric", "small_world", "karate_club", "davis_southern_women",
                "florentine_families", "les_miserables", "edge_list"}

    assert required <= set(GRAPH_BUILDERS)
