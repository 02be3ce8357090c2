"""Epsilon against shortest-path distance: random walk vs gossip vs local DP (Fig. 1 of Cyffers,
Bellet, Upadhyay, ICML 2024), as the authors' released code sets it up.

For each topology: Metropolis-Hastings W; the random walk runs T = `topologies.walk_length` steps
with N_u = T/n contributions (closed form (R2) of `topologies.random_walk_pndp`); gossip runs one
Muffliato averaging of the mixing time (`muffliato_rounds`, accelerated or not), accounted over
messages ``gossip_first_power`` .. with the weights W^t (``gossip_weights: powers``, what the
authors' code does even for accelerated gossip) or with the Chebyshev polynomials that accelerated
gossip actually runs (``polynomial``); local DP is one release, alpha / (2 sigma^2). Everything is Renyi
epsilon at order ``alpha`` with sensitivity 1, clipped at the local-DP value when asked (the
authors clip at 1 = alpha/(2 sigma^2) for alpha = 2, sigma = 1).

``random_walk_view: sender_known`` is the view of the authors' Fig. 1 (``maxi_priv``): v also
learns which neighbour sent the token, so its loss is the largest over its neighbours w != v of
the unknown-sender loss of the pair (u, w), the constant term included.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import scipy.sparse as sp

from testbed.decentralized.audit import message_polynomials, senders
from testbed.decentralized.config import ALGORITHMS, ComparisonConfig
from testbed.decentralized.phase import chebyshev_momentum, muffliato_rounds
from testbed.topologies import (
    epsilon_by_distance,
    gossip_pndp,
    harmonic_number,
    local_dp_loss,
    metropolis_hastings,
    random_walk_graph_term,
    random_walk_pndp,
    spectral_gap,
    walk_length,
)


def random_walk_loss(walk: np.ndarray, graph, T: int, sigma: float, alpha: float, view: str) -> np.ndarray:
    """Random-walk Renyi loss eps[u, v] with N_u = T/n, for the sender-unknown or -known view."""
    if view == "sender_unknown":
        return random_walk_pndp(walk, T=T, sigma=sigma, alpha=alpha)
    n = walk.shape[0]
    full = random_walk_graph_term(walk)
    full += harmonic_number(T) / n
    full *= alpha / sigma**2 * T / n
    known = np.empty_like(full)
    for v in range(n):
        neighbours = [w for w in graph.neighbors(v) if w != v]
        known[:, v] = full[:, neighbours].max(axis=1)
    np.fill_diagonal(known, 0.0)
    return known


def gossip_loss(walk: np.ndarray, rounds: int, gamma: float, sigma: float, alpha: float,
                first_power: int) -> np.ndarray:
    """Muffliato bound (M1) over messages first_power .. first_power + rounds - 1 of the gossip
    polynomial (W^t when gamma = 1, by `topologies.gossip_pndp`; Chebyshev otherwise)."""
    if gamma == 1.0:
        return gossip_pndp(walk, rounds=rounds, sigma=sigma, alpha=alpha, first_power=first_power)
    shares = np.zeros(walk.shape)
    for t, polynomial in enumerate(message_polynomials(walk, first_power + rounds, gamma)):
        if t >= first_power:
            shares += polynomial**2 / np.einsum("ij,ij->i", polynomial, polynomial)[:, None]
    eps = alpha / (2.0 * sigma**2) * np.asarray(sp.csr_array(senders(walk)) @ shares).T
    np.fill_diagonal(eps, 0.0)
    return eps


def losses(graph, config: ComparisonConfig) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The three n x n loss matrices of one graph, and the walk lengths and gap used."""
    walk = metropolis_hastings(graph)
    sigma, alpha = config.sigma, config.alpha
    T = walk_length(walk, sigma, config.walk_factor)
    rounds = muffliato_rounds(walk, sigma, config.accelerated)
    polynomial = config.accelerated and config.gossip_weights == "polynomial"
    gamma = chebyshev_momentum(walk) if polynomial else 1.0
    local = local_dp_loss(alpha=alpha, sigma=sigma)
    result = {"random_walk": random_walk_loss(walk, graph, T, sigma, alpha, config.random_walk_view),
              "gossip": gossip_loss(walk, rounds, gamma, sigma, alpha, config.gossip_first_power),
              "local_dp": np.full(walk.shape, local)}
    if config.clip_to_local:
        result = {name: np.minimum(eps, local) for name, eps in result.items()}
    for eps in result.values():
        np.fill_diagonal(eps, 0.0)
    facts = {"n": walk.shape[0], "walk_steps": T, "gossip_rounds": rounds, "gap": spectral_gap(walk)}
    return result, facts


def profiles(graphs: list, config: ComparisonConfig) -> dict[str, np.ndarray]:
    """Per-distance mean, min and max of each algorithm's loss over all pairs (or the pairs (u, v)
    of ``config.source`` u), pooled over the draws ``graphs`` of one topology (mean of the draws'
    means; min of mins; max of maxes)."""
    pooled: dict[str, dict[int, list]] = {name: {} for name in ALGORITHMS}
    facts = []
    for graph in graphs:
        matrices, fact = losses(graph, config)
        facts.append([fact["n"], fact["walk_steps"], fact["gossip_rounds"], fact["gap"]])
        sources = None if config.source is None else [min(config.source, graph.number_of_nodes() - 1)]
        for name, eps in matrices.items():
            profile = epsilon_by_distance(eps if sources is None else eps[sources], graph, sources=sources)
            for d, mean, low, high in zip(profile.distance, profile.mean, profile.minimum, profile.maximum):
                pooled[name].setdefault(int(d), []).append((mean, low, high))
    result = {"facts": np.asarray(facts, dtype=np.float64).mean(axis=0)}
    for name, by_distance in pooled.items():
        distance = np.array(sorted(by_distance))
        rows = [np.array(by_distance[d]) for d in distance]
        result[f"{name}.distance"] = distance
        result[f"{name}.mean"] = np.array([r[:, 0].mean() for r in rows])
        result[f"{name}.min"] = np.array([r[:, 1].min() for r in rows])
        result[f"{name}.max"] = np.array([r[:, 2].max() for r in rows])
    return result


class Crossover(TypedDict):
    """Where the random walk beats gossip (see `crossover`)."""

    walk_below_gossip_at: list[int]
    gossip_overtakes_from: int | None


def crossover(result: dict[str, np.ndarray]) -> Crossover:
    """Where the random walk's mean loss is below gossip's, and the first distance from which
    gossip stays at or below it (None when it never does)."""
    distance = result["random_walk.distance"]
    walk, gossip = result["random_walk.mean"], result["gossip.mean"]
    below = [int(d) for d, w, g in zip(distance, walk, gossip) if w < g]
    overtakes = None
    for index in range(len(distance)):
        if np.all(gossip[index:] <= walk[index:]) and np.any(gossip[index:] < walk[index:]):
            overtakes = int(distance[index])
            break
    return {"walk_below_gossip_at": below, "gossip_overtakes_from": overtakes}


def final_numbers(result: dict[str, np.ndarray]) -> dict[str, float]:
    """The scalar summary of one topology's profiles that a run reports as final metrics.

    ``walk_below_gossip_share``: the share of the distances present at which the random walk's
    mean loss is strictly below gossip's; ``gossip_overtakes_from``: `crossover`'s distance, or the
    sentinel ``max_distance + 1`` when gossip never overtakes (so ``gossip_overtakes_from <=
    max_distance`` says that it does); ``random_walk_d1`` and ``gossip_d1``: the mean losses at
    distance 1; ``max_distance``: the largest distance present (the graph's diameter when every
    pair is counted).
    """
    distance = result["random_walk.distance"]
    walk, gossip = result["random_walk.mean"], result["gossip.mean"]
    largest = int(distance.max())
    overtakes = crossover(result)["gossip_overtakes_from"]
    numbers = {"walk_below_gossip_share": float(np.mean(walk < gossip)),
               "gossip_overtakes_from": float(largest + 1 if overtakes is None else overtakes),
               "max_distance": float(largest)}
    at_one = np.flatnonzero(distance == 1)
    if at_one.size:
        numbers.update(random_walk_d1=float(walk[at_one[0]]), gossip_d1=float(gossip[at_one[0]]))
    return numbers
