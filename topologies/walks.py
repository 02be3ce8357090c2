"""Transition matrices on a graph, and the checks that a matrix is a usable walk.

Matrices are indexed by the graph's node order (0..n-1 for graphs from
`topologies.graphs`); W[u, v] is the probability that the token (random walk) or the
gossip weight goes from u to v. Two constructions are provided:

* `metropolis_hastings`: W[u, v] = 1 / (1 + max(d_u, d_v)) on edges, the rest of the
  mass on the diagonal. Symmetric and doubly stochastic, so the stationary
  distribution is uniform. This is the matrix of the experiments of Cyffers, Bellet,
  Upadhyay (ICML 2024), built here explicitly from the degrees.
* `simple_random_walk`: P = D^-1 A, stationary distribution proportional to degree;
  periodic on bipartite graphs, where `lazy_walk` makes it usable.

`validate_walk` refuses a non-stochastic, reducible (disconnected) or periodic matrix
with a `TopologyError`.
"""

from __future__ import annotations

import math
from functools import reduce

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ._checks import check_connected
from .errors import TopologyError

ATOL = 1e-10  # tolerance for row/column sums and symmetry of float matrices


def adjacency(graph: nx.Graph) -> sp.csr_array:
    """0/1 adjacency matrix of ``graph`` (edge weights and self-loops ignored)."""
    check_connected(graph)
    adj = nx.to_scipy_sparse_array(graph, nodelist=list(graph.nodes()), weight=None, format="csr")
    adj.setdiag(0)
    adj.eliminate_zeros()
    return sp.csr_array((adj > 0).astype(np.float64))


def metropolis_hastings(graph: nx.Graph, *, sparse: bool = False) -> np.ndarray | sp.csr_array:
    """Metropolis-Hastings weights: W[u,v] = 1/(1 + max(d_u, d_v)) for each edge {u,v},
    W[u,u] = 1 - sum_v W[u,v]. Symmetric and doubly stochastic; aperiodic whenever
    some node has a positive holding probability (always true: the node of largest
    degree d keeps 1/(d+1))."""
    adj = adjacency(graph).tocoo()
    deg = np.asarray(adj.sum(axis=1)).ravel()
    weights = 1.0 / (1.0 + np.maximum(deg[adj.row], deg[adj.col]))
    off = sp.csr_array((weights, (adj.row, adj.col)), shape=adj.shape)
    hold = 1.0 - np.asarray(off.sum(axis=1)).ravel()
    matrix = sp.csr_array(off + sp.diags_array(hold))
    return matrix if sparse else matrix.toarray()


def simple_random_walk(graph: nx.Graph, *, sparse: bool = False) -> np.ndarray | sp.csr_array:
    """Simple random walk P[u,v] = 1/d_u for each neighbour v of u (P = D^-1 A).

    Row stochastic but neither symmetric nor doubly stochastic unless the graph is
    regular; periodic (and refused by `validate_walk`) when the graph is bipartite.
    """
    adj = adjacency(graph)
    deg = np.asarray(adj.sum(axis=1)).ravel()
    matrix = sp.csr_array(sp.diags_array(1.0 / deg) @ adj)
    return matrix if sparse else matrix.toarray()


def lazy_walk(matrix, holding: float = 0.5):
    """Lazy version holding*I + (1-holding)*W: same stationary law, always aperiodic."""
    if not 0 < holding < 1:
        raise TopologyError(f"holding probability must be in (0, 1) (got {holding})")
    n = matrix.shape[0]
    eye = sp.eye_array(n, format="csr") if sp.issparse(matrix) else np.eye(n)
    return holding * eye + (1.0 - holding) * matrix


def check_stochastic(matrix, atol: float = ATOL) -> None:
    """Raise unless ``matrix`` is square, finite, non-negative with rows summing to 1."""
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise TopologyError(
            f"transition matrix must be square n x n with n >= 2 (got shape {matrix.shape})"
        )
    values = matrix.data if sp.issparse(matrix) else matrix
    if not np.all(np.isfinite(values)):
        raise TopologyError("transition matrix is not stochastic: it has non-finite entries")
    if values.size and values.min() < -atol:
        low = values.min()
        raise TopologyError(f"transition matrix is not stochastic: negative entry {low:.3g}")
    _check_sums(np.asarray(matrix.sum(axis=1)).ravel(), "row", atol)


def check_doubly_stochastic(matrix, atol: float = ATOL) -> None:
    """Raise unless ``matrix`` is stochastic and its columns also sum to 1."""
    check_stochastic(matrix, atol)
    _check_sums(np.asarray(matrix.sum(axis=0)).ravel(), "column", atol)


def check_symmetric(matrix, atol: float = ATOL) -> None:
    """Raise unless ``matrix`` equals its transpose up to ``atol``."""
    gap = abs(matrix - matrix.T).max()
    if gap > atol:
        raise TopologyError(f"transition matrix is not symmetric (max |W - W^T| = {gap:.3g})")


def _check_sums(sums: np.ndarray, kind: str, atol: float) -> None:
    """Raise naming the first row/column whose sum is not 1."""
    bad = np.flatnonzero(np.abs(sums - 1.0) > atol)
    if bad.size:
        i = int(bad[0])
        raise TopologyError(
            f"transition matrix is not stochastic: {kind} {i} sums to {sums[i]:.12g}"
        )


def _support(matrix) -> sp.csr_array:
    """Directed 0/1 graph of the positive entries of ``matrix``."""
    return sp.csr_array((sp.csr_array(matrix) > 0).astype(np.int8))


def check_irreducible(matrix) -> None:
    """Raise unless every node reaches every other node (one strong component)."""
    count, _ = csgraph.connected_components(_support(matrix), directed=True, connection="strong")
    if count > 1:
        raise TopologyError(f"walk is reducible: its graph is disconnected ({count} components)")


def period(matrix) -> int:
    """Period of an irreducible walk: gcd over edges u->v of level(u) + 1 - level(v),
    with levels = BFS distances from node 0 (standard period algorithm)."""
    support = _support(matrix)
    level = csgraph.shortest_path(support, unweighted=True, indices=0).astype(np.int64)
    coo = support.tocoo()
    return int(reduce(math.gcd, np.abs(level[coo.row] + 1 - level[coo.col]).tolist(), 0))


def check_aperiodic(matrix) -> None:
    """Raise if the (irreducible) walk is periodic, e.g. a simple walk on a bipartite graph."""
    walk_period = period(matrix)
    if walk_period != 1:
        raise TopologyError(f"walk is periodic (period {walk_period}); use a lazy walk")


def validate_walk(
    matrix, *, doubly_stochastic: bool = False, symmetric: bool = False, atol: float = ATOL
):
    """Check that ``matrix`` is an ergodic walk; return it as float64 (dense or CSR).

    Raises `TopologyError` for a non-stochastic, reducible or periodic matrix, and, when
    asked, for one that is not doubly stochastic or not symmetric.
    """
    if sp.issparse(matrix):
        matrix = sp.csr_array(matrix, dtype=np.float64)
    else:
        matrix = np.asarray(matrix, dtype=np.float64)
    if doubly_stochastic:
        check_doubly_stochastic(matrix, atol)
    else:
        check_stochastic(matrix, atol)
    if symmetric:
        check_symmetric(matrix, atol)
    check_irreducible(matrix)
    check_aperiodic(matrix)
    return matrix
