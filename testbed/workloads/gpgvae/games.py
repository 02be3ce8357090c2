"""Linear-quadratic network games on networkx graphs, and the data-dependent gated prior over edges.

Generative story of GPGVAE (Yu, Li, Leng, Liao, ICML 2024, Sec. 3): N players on a graph with
adjacency A and normalised adjacency Ã = D^-1/2 A D^-1/2 play G independent games. Each player's
best response to the others is ``x_i = b_i + beta * sum_j Ã_ij x_j``, so the equilibrium actions are
``X = (I - beta Ã)^-1 B``; the marginal benefits ``B ~ N(0, (I - alpha Ã)^-1)`` are smooth on the
graph. ``beta > 0`` makes actions strategic complements (neighbours act alike), ``beta < 0``
substitutes (neighbours act oppositely). Observation noise is added at a given signal-to-noise
ratio and every game (column) is scaled to unit norm.

The gated prior (Sec. 4.1) turns the correlation of two players' actions into an edge probability
whose sign depends on the interaction type: ``(1 + corr) / 2`` for complements, ``(1 - corr) / 2``
for substitutes, 0.5 when the type is unknown ("random").
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np


@dataclass(frozen=True)
class GameSet:
    """Observed actions of many graphs with their true adjacency and interaction sign."""

    actions: np.ndarray  # [graphs, N, G] float32
    adjacency: np.ndarray  # [graphs, N, N] 0/1 float32
    beta: np.ndarray  # [graphs] the strength and sign of the interaction


def random_graph(kind: str, nodes: int, rng: np.random.Generator) -> np.ndarray:
    """Adjacency of a Barabási-Albert, Erdős-Rényi or Watts-Strogatz graph with no isolated node."""
    seed = int(rng.integers(2**31))
    if kind == "ba":
        graph = nx.barabasi_albert_graph(nodes, 2, seed=seed)
    elif kind == "er":
        graph = nx.gnp_random_graph(nodes, 4.0 / nodes, seed=seed)
    else:
        graph = nx.connected_watts_strogatz_graph(nodes, 4, 0.2, seed=seed)
    adjacency = nx.to_numpy_array(graph, nodelist=range(nodes))
    for lonely in np.flatnonzero(adjacency.sum(1) == 0):  # Ã needs every degree > 0
        other = (lonely + 1 + int(rng.integers(nodes - 1))) % nodes
        adjacency[lonely, other] = adjacency[other, lonely] = 1.0
    return adjacency


def normalised_adjacency(adjacency: np.ndarray) -> np.ndarray:
    """Ã = D^-1/2 A D^-1/2 (eigenvalues in [-1, 1])."""
    inv_sqrt = 1.0 / np.sqrt(adjacency.sum(1))
    return adjacency * inv_sqrt[:, None] * inv_sqrt[None, :]


def equilibrium_actions(adjacency: np.ndarray, benefits: np.ndarray, beta: float) -> np.ndarray:
    """The Nash equilibrium of the linear-quadratic game: the fixed point of every best response."""
    a_norm = normalised_adjacency(adjacency)
    return np.linalg.solve(np.eye(len(adjacency)) - beta * a_norm, benefits)


def play_games(adjacency: np.ndarray, beta: float, alpha: float, games: int, snr: float,
               rng: np.random.Generator) -> np.ndarray:
    """Equilibrium actions of ``games`` games with smooth benefits and noise, columns of unit norm."""
    nodes = len(adjacency)
    eigenvalues, eigenvectors = np.linalg.eigh(np.eye(nodes) - alpha * normalised_adjacency(adjacency))
    # B ~ N(0, (I - alpha Ã)^-1): colour white noise with the inverse square root of I - alpha Ã.
    benefits = eigenvectors @ (rng.standard_normal((nodes, games)) / np.sqrt(eigenvalues)[:, None])
    actions = equilibrium_actions(adjacency, benefits, beta)
    noise_std = np.sqrt(actions.var() / snr)
    actions = actions + noise_std * rng.standard_normal(actions.shape)
    return actions / np.linalg.norm(actions, axis=0, keepdims=True)


def game_set(signs: list[float], nodes: int, games: int, alpha: float, snr: float, kind: str,
             rng: np.random.Generator) -> GameSet:
    """One graph of ``kind`` and its games for every entry of ``signs`` (the beta of that graph)."""
    adjacency = [random_graph(kind, nodes, rng) for _ in signs]
    actions = [play_games(a, beta, alpha, games, snr, rng) for a, beta in zip(adjacency, signs)]
    return GameSet(np.array(actions, np.float32), np.array(adjacency, np.float32), np.array(signs, np.float32))


def correlation(actions: np.ndarray) -> np.ndarray:
    """Pearson correlation between players' action vectors, ``[..., N, N]``."""
    centred = actions - actions.mean(-1, keepdims=True)
    scaled = centred / np.linalg.norm(centred, axis=-1, keepdims=True)
    return scaled @ np.swapaxes(scaled, -1, -2)


def gated_prior(corr: np.ndarray, gate: np.ndarray | str) -> np.ndarray:
    """Edge probabilities of the prior: complement ``(1+corr)/2``, substitute ``(1-corr)/2``, random 0.5.

    ``gate`` is one of "complement" | "substitute" | "random", or a per-graph array of those.
    """
    gate = np.broadcast_to(np.asarray(gate), corr.shape[:-2])[..., None, None]
    prior = np.where(gate == "complement", (1 + corr) / 2, np.where(gate == "substitute", (1 - corr) / 2, 0.5))
    return np.clip(prior, 1e-3, 1 - 1e-3)


def spectrum_features(actions: np.ndarray, count: int = 10) -> np.ndarray:
    """Input of the type classifier, from the eigendecomposition of cov(X) over games.

    The ``count`` largest eigenvalues times N (sorted), and for each of their eigenvectors v its
    coherence ``|1'v| / sqrt(N)``: complements amplify the all-positive Perron direction of Ã,
    substitutes an alternating one. (Eigenvalues alone classified only ~75-85% of beta = -0.8
    games at this scale; the graph itself is never used.)
    """
    nodes = actions.shape[0]
    eigenvalues, eigenvectors = np.linalg.eigh(actions @ actions.T / actions.shape[1])
    eigenvalues, eigenvectors = eigenvalues[::-1][:count], eigenvectors[:, ::-1][:, :count]
    coherence = np.abs(eigenvectors.sum(0)) / np.sqrt(nodes)
    pad = (0, count - len(eigenvalues))
    return np.concatenate([np.pad(eigenvalues * nodes, pad), np.pad(coherence, pad)]).astype(np.float32)


def pretraining_set(graphs: int, games: int, alpha: float, snr: float,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Spectrum features and sign labels (1 = complement) of the type classifier's pretraining games.

    Random BA/ER/WS graphs with N in [10, 50) players and beta ~ U(-0.9, 0.9).
    """
    features, labels = [], []
    for _ in range(graphs):
        kind = ("ba", "er", "ws")[int(rng.integers(3))]
        beta = float(rng.uniform(-0.9, 0.9))
        actions = play_games(random_graph(kind, int(rng.integers(10, 50)), rng), beta, alpha, games, snr, rng)
        features.append(spectrum_features(actions))
        labels.append(float(beta > 0))
    return np.array(features, np.float32), np.array(labels, np.float32)
