"""Graph builders for the communication topologies, and their name registry.

Every builder returns an undirected, connected, simple `networkx.Graph` whose nodes
are the integers ``0 .. n-1`` (the original label, when there was one, is kept in the
node attribute ``"label"``) and whose ``graph["name"]`` is the registry name. Every
builder takes keyword parameters and a keyword ``seed: int``; deterministic builders
ignore the seed (and declare so with `seedless`), randomised ones require it and return
the same graph for the same seed. `GRAPH_BUILDERS` maps a scenario name (the builder's function name) to its builder,
so that a YAML scenario can say ``topology: {name: hypercube, dim: 11}`` and call
`graph_from_spec`; a caller with builders of its own (a host's plugins) passes ``builders``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import networkx as nx
import numpy as np

from . import real_graphs
from ._checks import finish_graph, require_int, require_prob, seedless
from .errors import TopologyError
from .symmetry import record_group


@seedless
def complete(*, n: int, seed: int = 0) -> nx.Graph:
    """Complete graph K_n: every pair of nodes is an edge."""
    n = require_int("n", n, 2)
    return record_group(finish_graph(nx.complete_graph(n), "complete"), "cyclic", (n,))


@seedless
def ring(*, n: int, seed: int = 0) -> nx.Graph:
    """Cycle C_n (n >= 3): node i is linked to i-1 and i+1 mod n."""
    n = require_int("n", n, 3)
    return record_group(finish_graph(nx.cycle_graph(n), "ring"), "cyclic", (n,))


@seedless
def grid(*, rows: int, cols: int, periodic: bool = False, seed: int = 0) -> nx.Graph:
    """2-D lattice of rows x cols nodes; node r*cols + c sits at (r, c).

    With ``periodic=True`` the lattice wraps around (a torus), which needs rows, cols >= 3
    so that the wrap-around edges are not duplicates of lattice edges.
    """
    low = 3 if periodic else 1
    r, c = require_int("rows", rows, low), require_int("cols", cols, low)
    if r * c < 2:
        raise TopologyError(f"graph 'grid' needs at least 2 nodes (got {r}x{c})")
    lattice = finish_graph(nx.grid_2d_graph(r, c, periodic=periodic), "torus" if periodic else "grid",
                           ordering="sorted")
    return record_group(lattice, "cyclic", (r, c)) if periodic else lattice


@seedless
def torus(*, rows: int, cols: int, seed: int = 0) -> nx.Graph:
    """Periodic rows x cols lattice (each node has degree 4); see `grid`."""
    return grid(rows=rows, cols=cols, periodic=True, seed=seed)


@seedless
def hypercube(*, dim: int, seed: int = 0) -> nx.Graph:
    """Hypercube Q_dim on 2**dim nodes; node i and j are linked iff their bits differ once."""
    dim = require_int("dim", dim, 1)
    # Built on integers (node i's bits are the binary digits of i, so XOR is the group), not with
    # nx.hypercube_graph, whose graph product and relabelling take seconds at dim 11. Same nodes,
    # edges and "label" (the bit tuple, first bit most significant) as that graph sorted.
    nodes = np.arange(2**dim)
    cube = nx.Graph()
    cube.add_nodes_from((int(i), {"label": tuple(int(b) for b in np.binary_repr(i, dim))}) for i in nodes)
    cube.add_edges_from((int(i), int(i | 1 << k)) for k in range(dim) for i in nodes[(nodes >> k) & 1 == 0])
    return record_group(finish_graph(cube, "hypercube"), "xor", (2**dim,))


@seedless
def exponential(*, n: int, seed: int = 0) -> nx.Graph:
    """Undirected exponential graph: node i is linked to i +- 2**k mod n for all 2**k < n.

    This is the symmetrised version of the static exponential graph of Ying et al.
    (NeurIPS 2021, "Exponential graph is provably efficient for decentralized deep
    training"), so that Metropolis-Hastings weights make it doubly stochastic.
    """
    n = require_int("n", n, 2)
    graph = nx.empty_graph(n)
    hops = [2**k for k in range(n.bit_length()) if 2**k < n]
    graph.add_edges_from((i, (i + h) % n) for i in range(n) for h in hops)
    return finish_graph(graph, "exponential")


def erdos_renyi(*, n: int, seed: int, p: float | None = None, max_tries: int = 100) -> nx.Graph:
    """Connected Erdos-Renyi G(n, p) graph, redrawn until connected.

    ``p`` defaults to 1.2 ln(n)/n, the value used in the experiments of Cyffers,
    Bellet, Upadhyay (ICML 2024) as read in their released code (not the paper).
    """
    n = require_int("n", n, 2)
    p = require_prob("p", min(1.0, 1.2 * np.log(n) / n) if p is None else p)
    return _connected_draw(
        "erdos_renyi", lambda s: nx.fast_gnp_random_graph(n, p, seed=s), seed, max_tries
    )


def random_geometric(
    *, n: int, radius: float, seed: int, dim: int = 2, max_tries: int = 100
) -> nx.Graph:
    """Connected random geometric graph: n uniform points in [0,1]^dim, linked when closer
    than ``radius``; redrawn until connected. Positions are kept in node attribute "pos"."""
    n, dim = require_int("n", n, 2), require_int("dim", dim, 1)
    if not radius > 0:
        raise TopologyError(f"radius must be > 0 (got {radius})")
    return _connected_draw(
        "random_geometric",
        lambda s: nx.random_geometric_graph(n, radius, dim=dim, seed=s),
        seed,
        max_tries,
    )


def small_world(*, n: int, seed: int, k: int = 4, p: float = 0.1, max_tries: int = 100) -> nx.Graph:
    """Connected Watts-Strogatz small-world graph: a ring where each node links to its k
    nearest neighbours, each edge rewired with probability p; redrawn until connected."""
    n, k, p = require_int("n", n, 3), require_int("k", k, 2), require_prob("p", p)
    if k >= n:
        raise TopologyError(f"graph 'small_world' needs k < n (got k={k}, n={n})")
    return _connected_draw(
        "small_world", lambda s: nx.watts_strogatz_graph(n, k, p, seed=s), seed, max_tries
    )


def _connected_draw(
    name: str, draw: Callable[[int], nx.Graph], seed: int, max_tries: int
) -> nx.Graph:
    """Redraw a random graph with sub-seeds derived from ``seed`` until it is connected.

    Sub-seeds come from one numpy Generator so that the result depends on ``seed`` only.
    """
    rng = np.random.default_rng(require_int("seed", seed, 0))
    components = 0
    for _ in range(require_int("max_tries", max_tries, 1)):
        graph = draw(int(rng.integers(2**32)))
        components = nx.number_connected_components(graph)
        if components == 1:
            return finish_graph(graph, name)
    raise TopologyError(
        f"graph '{name}' is disconnected ({components} components) in all {max_tries} draws"
    )


# Each builder is registered under its own function name, the name a scenario uses.
GRAPH_BUILDERS: dict[str, Callable[..., nx.Graph]] = {builder.__name__: builder for builder in (
    complete, ring, grid, torus, hypercube, exponential, erdos_renyi, random_geometric, small_world,
    real_graphs.karate_club, real_graphs.davis_southern_women, real_graphs.florentine_families,
    real_graphs.les_miserables, real_graphs.edge_list,
)}


def planned_size(name: str, params: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(nodes, edges) the builder ``name`` would make from ``params``, without building anything;
    None where the parameters do not say (a bundled, random or edge-list graph, or parameters of
    the wrong type, which the builder refuses)."""
    sizes = {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
    if name == "hypercube":
        dim = min(sizes["dim"], 64) if "dim" in sizes else None
        return (2**dim, dim * 2 ** max(dim - 1, 0)) if dim is not None and dim > 0 else (None, None)
    if name in ("grid", "torus"):
        return (sizes["rows"] * sizes["cols"], None) if {"rows", "cols"} <= sizes.keys() else (None, None)
    n = sizes.get("n")
    if name == "complete" and n is not None:
        return n, n * (n - 1) // 2
    return n, None


def build_graph(name: str, *, seed: int = 0, max_nodes: int | None = None, max_edges: int | None = None,
                builders: Mapping[str, Callable[..., nx.Graph]] | None = None, **params: Any) -> nx.Graph:
    """Build the registered graph ``name`` with keyword ``params`` and ``seed``.

    Unknown names and parameters the builder does not take raise `TopologyError`, and so does a
    graph of more than ``max_nodes`` nodes or ``max_edges`` edges (refused before it is built
    where its parameters say its size). ``builders``: the registry to look ``name`` up in
    (default `GRAPH_BUILDERS`).
    """
    builders = GRAPH_BUILDERS if builders is None else builders
    builder = builders.get(name)
    if builder is None:
        raise TopologyError(f"unknown graph '{name}' (known: {', '.join(sorted(builders))})")
    try:
        inspect.signature(builder).bind(seed=seed, **params)
    except TypeError as exc:
        raise TopologyError(f"graph '{name}': {exc}") from None
    nodes, edges = planned_size(name, params)
    _check_size(name, nodes, edges, max_nodes, max_edges, "would have")
    graph = builder(seed=seed, **params)
    _check_size(name, graph.number_of_nodes(), graph.number_of_edges(), max_nodes, max_edges, "has")
    return graph


def _check_size(name: str, nodes: int | None, edges: int | None, max_nodes: int | None, max_edges: int | None,
                verb: str) -> None:
    if max_nodes is not None and nodes is not None and nodes > max_nodes:
        raise TopologyError(f"graph '{name}' {verb} {nodes} nodes; at most {max_nodes} are supported")
    if max_edges is not None and edges is not None and edges > max_edges:
        raise TopologyError(f"graph '{name}' {verb} {edges} edges; at most {max_edges} are supported")


def graph_from_spec(spec: Mapping[str, Any], seed: int = 0, max_nodes: int | None = None,
                    max_edges: int | None = None,
                    builders: Mapping[str, Callable[..., nx.Graph]] | None = None) -> nx.Graph:
    """Build a graph from a scenario mapping such as ``{"name": "hypercube", "dim": 11}``.

    A ``seed`` key in the mapping takes precedence over the ``seed`` argument; ``max_nodes`` and
    ``max_edges`` bound the graph's size, ``builders`` is the registry (see `build_graph`).
    """
    params = dict(spec)
    if "name" not in params:
        raise TopologyError("topology spec has no 'name' key")
    name = params.pop("name")
    return build_graph(name, seed=params.pop("seed", seed), max_nodes=max_nodes, max_edges=max_edges,
                       builders=builders, **params)
