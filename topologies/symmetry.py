"""Translation symmetry of the graphs that are Cayley graphs of abelian groups: one row of a
pairwise quantity gives the whole matrix.

The hypercube (the group Z_2^dim on node i's bits), the ring and the complete graph (Z_n) and the
torus (Z_rows x Z_cols on node r * cols + c) are Cayley graphs of abelian groups on their node
indices: for every node u the translation g -> u + g is an automorphism of the graph that maps node
0 to u. A walk matrix built from the graph alone (Metropolis-Hastings, the simple or the lazy walk)
is then invariant under every translation, and so is every power and sum of powers of it:
f(W)[u, v] = f(W)[0, v - u]. The random-walk accountant uses this to follow one row in O(edges)
a step instead of the n x n matrix in O(n * edges), which is what makes the paper's 2048-node
hypercube (20000 steps) take seconds rather than a quarter of an hour.

The builders record their group on the graph (`record_group`); `row_symmetry` returns the
group's difference v - u only after checking that the walk matrix is invariant under a few
translations, so a walk whose weights break the symmetry falls back to the dense accountant.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np

GROUP_KEY = "translation_group"

Difference = Callable[[np.ndarray, np.ndarray], np.ndarray]


def record_group(graph: nx.Graph, kind: str, shape: tuple[int, ...]) -> nx.Graph:
    """Mark ``graph`` as the Cayley graph of Z_2^k (``kind`` "xor") or of Z_{shape[0]} x ...
    (``kind`` "cyclic", nodes in row-major order of ``shape``) on its node indices."""
    if kind not in ("xor", "cyclic"):
        raise ValueError(f"unknown translation group {kind!r}")
    graph.graph[GROUP_KEY] = (kind, tuple(int(s) for s in shape))
    return graph


def group_difference(graph: nx.Graph) -> Difference | None:
    """v - u in the group the builder recorded (elementwise over broadcast index arrays), or None."""
    group = graph.graph.get(GROUP_KEY)
    if group is None:
        return None
    kind, shape = group
    if kind == "xor":
        return np.bitwise_xor
    sizes = np.array(shape)

    def cyclic(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        u, v = np.broadcast_arrays(np.asarray(u), np.asarray(v))
        parts = [(b - a) % s for a, b, s in zip(np.unravel_index(u, shape), np.unravel_index(v, shape), sizes)]
        return np.ravel_multi_index(tuple(parts), shape)

    return cyclic


def generators(graph: nx.Graph) -> list[int]:
    """Nodes whose translations generate the recorded group: the powers of two for Z_2^k, the unit
    steps of each axis for Z_a x Z_b (in row-major node indices)."""
    kind, shape = graph.graph[GROUP_KEY]
    if kind == "xor":
        return [1 << k for k in range(int(shape[0]).bit_length() - 1)]
    strides = np.cumprod((1, *shape[::-1]))[:-1][::-1]  # row-major index of each axis' unit step
    return [int(s) for s, size in zip(strides, shape) if size > 1]


def is_invariant(matrix: np.ndarray, difference: Difference, steps: list[int]) -> bool:
    """Whether ``matrix`` is invariant under the translations by ``steps`` (and so under the group
    they generate): matrix[a + u, b + u] = matrix[a, b], to rounding.

    Checked on the nonzero entries only, O(nonzeros) a step: a permutation that maps every nonzero
    entry onto an equal one maps the zeros onto zeros, as there are as many of each.
    """
    n = matrix.shape[0]
    rows, cols = np.nonzero(matrix)
    values = matrix[rows, cols]
    for u in steps:
        shifted = difference(np.full(n, u), np.arange(n))  # a -> a - u, a permutation of the nodes
        if np.unique(shifted).size != n or not np.allclose(matrix[shifted[rows], shifted[cols]], values,
                                                           rtol=1e-12, atol=1e-15):
            return False
    return True


def row_symmetry(graph: nx.Graph, matrix: np.ndarray) -> Difference | None:
    """The group difference when ``graph`` recorded a group and ``matrix`` respects it, else None."""
    difference = group_difference(graph)
    if difference is None or graph.number_of_nodes() != matrix.shape[0]:
        return None
    return difference if is_invariant(matrix, difference, generators(graph)) else None


def full_matrix(row: np.ndarray, difference: Difference) -> np.ndarray:
    """The matrix M with M[u, v] = row[v - u]."""
    nodes = np.arange(row.shape[0])
    return row[difference(nodes[:, None], nodes[None, :])]
