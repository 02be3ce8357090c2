"""Shared input checks for the graph builders (internal).

They turn bad parameters and unusable graphs into one-line `TopologyError`s, so the
builders stay short and every message has the same shape.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import TypeVar, cast

import networkx as nx

from .errors import TopologyError

Builder = TypeVar("Builder", bound=Callable[..., nx.Graph])


def seedless(builder: Builder) -> Builder:
    """Declare a deterministic graph builder: it takes ``seed`` and ignores it, so a caller may build
    its graph once for every seed (``builder.seedless``; a builder that does not say so is seeded)."""
    builder.seedless = True  # type: ignore[attr-defined]
    return builder


def require_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int if it is an integer >= ``minimum``, else raise."""
    # bool is an Integral in Python; a YAML `n: true` is a mistake, not n = 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TopologyError(f"{name} must be an integer (got {value!r})")
    if value < minimum:
        raise TopologyError(f"{name} must be >= {minimum} (got {value})")
    return int(value)


def require_prob(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a probability in [0, 1], else raise."""
    # cast: typeshed's numbers.Real does not declare comparisons with int (no runtime effect).
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= cast(float, value) <= 1:
        raise TopologyError(f"{name} must be a probability in [0, 1] (got {value!r})")
    return float(value)


def check_connected(graph: nx.Graph, name: str | None = None) -> None:
    """Raise `TopologyError` unless ``graph`` has >= 2 nodes and is connected."""
    name = name or graph.graph.get("name") or "unnamed"
    if graph.number_of_nodes() < 2:
        count = graph.number_of_nodes()
        raise TopologyError(f"graph '{name}' needs at least 2 nodes (got {count})")
    if graph.is_directed():
        raise TopologyError(f"graph '{name}' is directed; topologies are undirected")
    components = nx.number_connected_components(graph)
    if components > 1:
        raise TopologyError(f"graph '{name}' is disconnected ({components} components)")


def finish_graph(graph: nx.Graph, name: str, ordering: str = "default") -> nx.Graph:
    """Make ``graph`` a connected simple graph on nodes 0..n-1 named ``name``.

    Self-loops are dropped: the transition matrices add their own holding
    probability, and a self-loop would otherwise change the node degrees.
    """
    simple = nx.Graph(graph)
    simple.remove_edges_from(list(nx.selfloop_edges(simple)))
    simple.graph["name"] = name
    check_connected(simple, name)
    if list(simple.nodes()) != list(range(simple.number_of_nodes())):
        simple = nx.convert_node_labels_to_integers(
            simple, ordering=ordering, label_attribute="label"
        )
        simple.graph["name"] = name
    return simple
