"""Real-world graphs: the social networks bundled with networkx, and edge-list files.

Each builder has the registry signature of `topologies.graphs` (keyword parameters
and a ``seed`` that these deterministic builders ignore) and returns a connected
simple graph on nodes 0..n-1, the original node name kept in attribute "label".
Edge weights of the bundled graphs are dropped from the topology's meaning: the
transition matrices only use the edge set.
"""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx

from ._checks import finish_graph, seedless
from .errors import TopologyError


@seedless
def karate_club(*, seed: int = 0) -> nx.Graph:
    """Zachary's karate club: 34 members, 78 friendships."""
    return finish_graph(nx.karate_club_graph(), "karate_club")


@seedless
def davis_southern_women(*, seed: int = 0) -> nx.Graph:
    """Davis Southern Women: bipartite, 18 women and 14 events (32 nodes, 89 edges).

    It is the real graph of Fig. 3 of Cyffers, Bellet, Upadhyay (ICML 2024).
    """
    return finish_graph(nx.davis_southern_women_graph(), "davis_southern_women")


@seedless
def florentine_families(*, seed: int = 0) -> nx.Graph:
    """Marriage ties between Renaissance Florentine families (15 nodes, 20 edges)."""
    return finish_graph(nx.florentine_families_graph(), "florentine_families")


@seedless
def les_miserables(*, seed: int = 0) -> nx.Graph:
    """Co-appearance of characters in Les Miserables (77 nodes, 254 edges)."""
    return finish_graph(nx.les_miserables_graph(), "les_miserables")


@seedless
def edge_list(*, path: str | Path, seed: int = 0) -> nx.Graph:
    """Read an undirected graph from a text file with one edge ``u v`` per line.

    Fields are separated by whitespace or commas; text after ``#`` is a comment;
    fields after the first two (weights, say) are ignored. Integer node names are
    sorted numerically, other names as strings, so node ids do not depend on line
    order. Self-loops and repeated edges are dropped; a disconnected file is refused.
    """
    if not isinstance(path, str | Path):
        raise TopologyError(f"path must be a file name (got {type(path).__name__} {str(path)[:80]!r})")
    file = Path(path)
    shown = str(file) if len(str(file)) <= 80 else str(file)[:77] + "..."
    try:
        exists = file.is_file()
    except (OSError, ValueError):  # a name the system refuses (too long, a NUL byte)
        exists = False
    if not exists:
        raise TopologyError(f"edge-list file '{shown}' does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TopologyError(f"edge-list file '{shown}' is not UTF-8 text") from None
    except OSError as err:  # unreadable (permissions)
        reason = getattr(err, "strerror", None) or err
        raise TopologyError(f"edge-list file '{shown}' cannot be read: {reason}") from None
    graph = nx.Graph()
    for number, line in enumerate(text.splitlines(), start=1):
        fields = [f for f in re.split(r"[\s,]+", line.split("#", 1)[0].strip()) if f]
        if not fields:
            continue
        if len(fields) < 2:
            raise TopologyError(
                f"edge-list file '{file.name}' line {number}: expected 'u v', got {line.strip()[:80]!r}"
            )
        graph.add_edge(fields[0], fields[1])
    name = f"edge_list:{file.name}"
    if all(re.fullmatch(r"-?\d+", str(node)) for node in graph.nodes()):
        graph = nx.relabel_nodes(graph, int)
    return finish_graph(graph, name, ordering="sorted")
