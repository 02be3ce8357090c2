"""Pairwise network DP of Muffliato gossip averaging, in Renyi form.

Setting (Cyffers, Even, Bellet, Massoulie, "Muffliato", NeurIPS 2022, arXiv
2206.05091): every node u adds N(0, sigma^2) noise once to its value x_u (l2
sensitivity Delta), then the nodes run synchronous gossip x <- W x. In round t+1 node
w sends its current value e_w^T W^t (x + eta) to each neighbour v, so the coefficient
of x_u in that message is (W^t)[w,u] and its noise has variance sigma^2 ||e_w^T W^t||^2.
Each message is a Gaussian mechanism on x_u; composing all messages v receives (M1):

    eps_{u->v}(alpha) = (alpha Delta^2 / (2 sigma^2))
                        * sum_{t=t0..t0+T-1} sum_{w -> v, w != v} (W^t)[w,u]^2 / ||e_w^T W^t||^2

For symmetric W this is the Muffliato bound as restated in the project notes
(sum over w in N(v) of (W^t)_{uw}^2 / ||W^t e_w||^2). Indexing: the messages of T rounds
are W^0 .. W^{T-1} (t0 = 0, the default, where a neighbour u leaks its first message
at the local-DP level alpha Delta^2/(2 sigma^2)); the authors' released code sums
W^1 .. W^T (t0 = 1). The two differ, so the convention is a parameter.

Not verified: the Muffliato PDF could not be read from this environment, so the
theorem number, the t-indexing of the paper and any condition on sigma are unchecked;
(M1) was derived here from the algorithm and the composition of Gaussian mechanisms.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._checks import require_int
from .accounting import require_order, require_positive
from .walks import validate_walk


def _senders(walk) -> sp.csr_array:
    """A[v, w] = 1 when v receives from w (W[v, w] > 0, w != v)."""
    support = sp.csr_array((sp.csr_array(walk) > 0).astype(np.float64))
    support.setdiag(0)
    support.eliminate_zeros()
    return support


def gossip_leakage_weights(matrix, rounds: int, first_power: int = 0) -> np.ndarray:
    """S[w, u] = sum_t (W^t)[w,u]^2 / ||e_w^T W^t||^2 over t = first_power .. first_power
    + rounds - 1: the share of message variance carried by x_u, summed over rounds."""
    walk = validate_walk(matrix)
    n = walk.shape[0]
    step = sp.csr_array(walk)
    power = np.eye(n)
    for _ in range(require_int("first_power", first_power, 0)):
        power = step @ power
    total = np.zeros((n, n))
    for _ in range(require_int("rounds", rounds, 1)):
        total += power**2 / np.einsum("ij,ij->i", power, power)[:, None]
        power = step @ power  # W^{t+1} = W W^t; sparse W keeps this O(n^2 d)
    return total


def gossip_pndp(
    matrix,
    *,
    rounds: int,
    sigma: float,
    alpha: float,
    sensitivity: float = 1.0,
    first_power: int = 0,
) -> np.ndarray:
    """PNDP matrix eps[u, v] = eps_{u->v}(alpha) of Muffliato gossip, bound (M1).

    ``rounds`` is the number of gossip rounds T; ``first_power`` the exponent of the
    first message (0: messages W^0..W^{T-1}; 1: the authors' code, W^1..W^T). Not
    symmetric in general. The diagonal is 0. Linear in alpha.
    """
    alpha = require_order(alpha)
    scale = alpha * require_positive("sensitivity", sensitivity) ** 2 / (
        2.0 * require_positive("sigma", sigma) ** 2
    )
    walk = validate_walk(matrix)
    weights = gossip_leakage_weights(walk, rounds, first_power)
    # eps[u, v] = scale * sum_w A[v, w] S[w, u] = scale * (A S)[v, u].
    eps = scale * np.asarray(_senders(walk) @ weights).T
    np.fill_diagonal(eps, 0.0)
    return eps
