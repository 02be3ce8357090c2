"""Tests for the Muffliato gossip PNDP accountant."""

import numpy as np
import pytest

from testbed.topologies import build_graph, gossip_pndp, metropolis_hastings


def _reference(w, rounds, first_power, sigma, alpha):
    """Loop-by-loop evaluation of bound (M1), independent of the vectorised code."""
    n = w.shape[0]
    eps = np.zeros((n, n))
    for t in range(first_power, first_power + rounds):
        power = np.linalg.matrix_power(w, t)
        for u in range(n):
            for v in range(n):
                for s in range(n):
                    if s != v and u != v and w[v, s] > 0:
                        eps[u, v] += power[s, u] ** 2 / (power[s] @ power[s])
    return alpha / (2 * sigma**2) * eps


@pytest.mark.parametrize("first_power", [0, 1])
def test_gossip_matches_loop_reference(first_power):
    w = metropolis_hastings(build_graph("florentine_families"))

    eps = gossip_pndp(w, rounds=4, sigma=1.5, alpha=3.0, first_power=first_power)

    np.testing.assert_allclose(eps, _reference(w, 4, first_power, 1.5, 3.0), rtol=1e-12, atol=1e-15)


def test_first_round_leaks_local_dp_to_neighbours_only():
    graph = build_graph("ring", n=6)
    w = metropolis_hastings(graph)

    eps = gossip_pndp(w, rounds=1, sigma=2.0, alpha=4.0)

    expected = np.zeros((6, 6))
    for u, v in graph.edges():
        expected[u, v] = expected[v, u] = 4.0 / (2 * 2.0**2)
    np.testing.assert_allclose(eps, expected, atol=1e-15)


def test_complete_graph_gossip_has_closed_form():
    # W = 11^T/n: each later message carries x_u with weight share 1/n, from n - 1 senders
    n, rounds = 10, 5
    w = metropolis_hastings(build_graph("complete", n=n))

    eps = gossip_pndp(w, rounds=rounds, sigma=1.0, alpha=2.0, first_power=1)

    off = ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(eps[off], (2.0 / 2.0) * rounds * (n - 1) / n, rtol=1e-12)


def test_gossip_loss_scales_as_alpha_over_sigma_squared():
    w = metropolis_hastings(build_graph("hypercube", dim=4), sparse=True)

    base = gossip_pndp(w, rounds=6, sigma=1.0, alpha=2.0)
    scaled = gossip_pndp(w, rounds=6, sigma=2.0, alpha=6.0)

    np.testing.assert_allclose(scaled, base * 3.0 / 4.0, rtol=1e-12)
