"""One-run canary audit of pairwise network DP (Steinke, Nasr, Jagielski, NeurIPS 2023).

Canaries: node u (``audit.source``) hosts m canaries, each included independently with probability
1/2. Canary i is the gradient C e_i in coordinate i of the audit block appended to every node
vector, so including it changes u's update by exactly the sensitivity C, at each of u's
contributions: the accountant's bound for the pair (u, v) therefore bounds the privacy of every
single canary, which is what the one-run theorem audits.

Attack: every node v is an attacker that sees only its own view (the token when it holds it; the
messages of its neighbours; the public releases under local DP) and scores each canary with a
matched filter, the observed audit coordinate weighted by how much of u's contribution the view is
expected to carry (`walk_attack_tables`, `gossip_attack_weights`). It guesses "included" for its r
best-scored canaries.

Lower bound (`testbed.privacy.one_run`, shared with the federated audit): with v correct guesses
among r, (epsilon, delta)-DP for each canary implies P[V >= v] <= beta + alpha delta 2m (Steinke et
al. 2023, Thm. 3.1 and its delta > 0 form). The largest epsilon this rejects at level
``significance`` is the reported lower bound; several r are tried with a Bonferroni correction, so
the bound holds with probability >= 1 - significance.

Power: even a perfect attacker certifies at most `audit_power` (every possible guess right), which
m canaries cap (with half of them in: about 2.9 for m = 200, 4.5 for m = 1000, at delta 1e-5 and
significance 0.05). A lower bound well below an accountant's epsilon means a loose accountant
only when that epsilon is below the power; above it, the audit is too weak to tell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from testbed.privacy.one_run import (
    GUESS_FRACTIONS,
    MAX_EPSILON,
    audit_power,
    epsilon_from_guesses,
    epsilon_lower_bound,
    guess_counts,
    one_run_p_value,
)

if TYPE_CHECKING:  # the accountants import this module while validating a scenario: torch only where it runs
    import torch

# The statistics are the kind-independent one-run audit's (`testbed.privacy.one_run`), importable
# from here as before.
__all__ = ["GUESS_FRACTIONS", "MAX_EPSILON", "audit_power", "epsilon_from_guesses", "epsilon_lower_bound",
           "gossip_attack_weights", "gossip_observe", "guess_counts", "message_polynomials", "one_run_p_value",
           "senders", "walk_attack_tables", "walk_observe"]


def walk_attack_tables(walk: np.ndarray, source: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Matched-filter weights of the random-walk attackers, from W = Phi diag(lambda) Phi^T.

    first[t, v]: a first visit of v at step t follows t noisy steps; u held the token at step j < t
    with probability W^{t-j}[u, v] (uniform start), so the weight is sum_{k=1..t} W^k[u,v] / t.
    gap[g, v]: between two visits of v g steps apart lie g - 1 noisy steps; the expected visits of
    u in between (walk bridge) are sum_{j=1..g-1} W^j[v,u] W^{g-j}[u,v] / W^g[v,v], so the weight
    is that over g - 1 (0 for g = 1).
    """
    import scipy.linalg as sla
    from scipy.signal import fftconvolve  # about 0.4 s of imports, for the audit of a run only

    values, vectors = sla.eigh(walk)
    powers = values[None, :] ** np.arange(steps + 1)[:, None]  # [steps+1, n]
    to_v = (powers * vectors[source]) @ vectors.T  # W^k[u, v]
    returns = powers @ (vectors**2).T  # W^g[v, v]
    first = np.zeros_like(to_v)
    first[1:] = np.cumsum(to_v[1:], axis=0) / np.arange(1, steps + 1)[:, None]
    bridge = np.zeros_like(to_v)
    if steps >= 2:
        bridge[2:] = fftconvolve(to_v[1:], to_v[1:], axes=0)[: steps - 1]
    gap = np.zeros_like(to_v)
    gap[2:] = bridge[2:] / np.maximum(returns[2:], 1e-300) / np.arange(1, steps)[:, None]
    gap[:, source] = first[:, source] = 0.0  # u does not attack itself
    return first, gap


def walk_observe(state: dict, tables: tuple[np.ndarray, np.ndarray], node: int, step: int,
                 received: torch.Tensor, sent: torch.Tensor) -> None:
    """Node ``node`` got the token's audit block ``received`` at ``step`` and forwards ``sent``:
    add its matched-filter evidence since its previous visit to its scores (in place)."""
    first, gap = tables
    last = int(state["attack_time"][node])
    weight = float(first[step, node] if last < 0 else gap[step - last, node])
    increment = received.double() - state["attack_sent"][node].double()
    state["attack_score"][node] -= weight * increment  # a canary pushes its coordinate down
    state["attack_sent"][node] = sent
    state["attack_time"][node] = step


def gossip_observe(scores: torch.Tensor, nodes, sender_rows: torch.Tensor, weights: torch.Tensor,
                   messages: torch.Tensor) -> None:
    """Nodes ``nodes`` receive the round's messages (audit blocks [n, m]) from their neighbours
    (``sender_rows`` = their rows of `senders`); add the weighted evidence (in place)."""
    import torch

    scores[torch.as_tensor(np.asarray(nodes))] -= sender_rows @ (weights[:, None] * messages.double())


def message_polynomials(walk: np.ndarray, rounds: int, gamma: float, start: np.ndarray | None = None):
    """P_t M for t = 0..rounds-1 (M = ``start``, default I) of one gossip averaging: P_0 = I,
    P_1 = W, P_{t+1} = gamma W P_t + (1 - gamma) P_{t-1}; gamma = 1 is plain gossip (P_t = W^t).
    The message of round t is Y_t = P_t Y_0. W is applied as a sparse matrix."""
    step = sp.csr_array(walk)
    previous, current = None, np.eye(walk.shape[0]) if start is None else start
    for _ in range(rounds):
        yield current
        following = step @ current
        if previous is not None and gamma != 1.0:
            following = gamma * following + (1.0 - gamma) * previous
        previous, current = current, following


def gossip_attack_weights(walk: np.ndarray, source: int, rounds: int, gamma: float) -> np.ndarray:
    """c[t, w] = P_t[w, u] / ||e_w^T P_t||^2: the matched-filter weight of the round-t message of w
    (the same ratio the Muffliato bound sums, without the square)."""
    return np.stack([p[:, source] / np.einsum("ij,ij->i", p, p) for p in message_polynomials(walk, rounds, gamma)])


def senders(walk: np.ndarray) -> np.ndarray:
    """A[v, w] = 1 when v receives w's messages (w a neighbour of v, w != v)."""
    support = (walk > 0).astype(np.float64)
    np.fill_diagonal(support, 0.0)
    return support
