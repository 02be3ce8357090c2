"""Topology ``star``: node 0 linked to every other node (a graph builder is a function)."""

from __future__ import annotations

import networkx as nx


def star(*, n: int, seed: int = 0) -> nx.Graph:
    """Example plugin: the star on n nodes, node 0 at the centre (deterministic: the seed is unused)."""
    graph = nx.star_graph(n - 1)  # nodes 0..n-1, node 0 linked to 1..n-1
    graph.graph["name"] = "star"
    return graph
