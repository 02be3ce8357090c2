"""The omniscient attacks as SDEA's authors ran them: threat model ``marsfl``.

SDEA (Huang et al., ICML 2024) was evaluated with the authors' MarsFL code base, whose LIE,
Min-Max and Min-Sum differ from the papers' (:mod:`testbed.strategies.omniscient`). Read in
WenkeHuang/MarsFL, ``Attack/byzantine/utils.py`` (commit bc9333639d42, function
``attack_net_para``; the same code at ``Attack/utils.py``, commit a7f4513645a6) and
``row_into_parameters`` in ``utils/utils.py`` (commit 562e4bcf5f9e). What differs:

* **What is uploaded.** The crafted vector is an *update* (computed from the benign clients'
  ``theta_k - theta_global`` over the whole state dict, buffers included), but it is written as
  the malicious network's *parameters*, without adding the global model back: the attackers
  upload a network close to zero. The write walks ``model.parameters()`` and fills each one from
  the next entries of the vector, so the parameters receive the vector's first ``P`` entries
  (``P`` = number of parameter entries) and the buffers (batch norm's running statistics and
  counter) keep the attacker's own honestly trained values. In a model whose buffers come before
  a parameter (batch norm followed by another layer), the later parameters therefore receive
  entries that belong to other tensors, buffers' updates among them; without buffers the
  upload is exactly the crafted update. :func:`write_into_parameters` does that write.
* **LIE's z.** ``s = n // 2 + 1 - m`` as in Baruch et al., but ``z = exp(-s^2) / (2 / sqrt(2 pi))``
  instead of the normal quantile ``Phi^-1((n - s) / n)``: about 1e-7 for SDEA's 10 clients with 2
  malicious. ``n`` counts the round's online clients and ``m = n - (benign clients of the whole
  federation)``. The crafted update is ``mean + z * std`` (the paper subtracts) of the benign
  updates, ``std`` with Bessel's correction.
* **Min-Sum's threshold** is the *smallest* benign sum of squared distances to the other benign
  updates (the paper's Eq. 5 takes the largest), so ``gamma`` solves
  ``gamma ||dev|| <= min_i ||b_i - mean||``: the crafted update stays next to the benign mean.
* **The gamma search** (Min-Max and Min-Sum) is the paper's halving search but stops when the
  width ``|gamma_succ - gamma|`` is at most ``tol``: one test more than
  :func:`testbed.strategies.omniscient.min_max` makes with the same ``tol``.

Min-Max's threshold (largest benign pairwise distance; MarsFL compares squared distances, the
same test), the directions (``unit`` = MarsFL's ``unit_vec``, ``std``, ``sign``) and the defaults
(``std``, ``gamma_init`` = MarsFL's ``lamda`` = 10, ``tol`` = ``threshold_diff`` = 1e-5) are the
faithful ones. The other attacks do not differ in MarsFL and keep their faithful behaviour under
``marsfl``: ``random_noise`` (its ``RandomNoise``: the untrained network), ``add_noise``
(``AddNoise``: halfway to it), ``pair_flip`` and ``sym_flip`` (``PairFlip``/``SymFlip`` label
noise); ``sign_flip`` and ``gaussian`` have no MarsFL counterpart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .attack_base import variant

if TYPE_CHECKING:  # the declarations import no torch (validation reads them); the functions do
    import torch
from .omniscient import _benign_stats, _max_distance, _optimised, _sum_sq_distance

THREAT_MODEL = "marsfl"


def lie_z(num_online: int, num_malicious: int) -> float:
    """MarsFL's LIE coefficient ``exp(-s^2) / (2 / sqrt(2 pi))`` with ``s = n // 2 + 1 - m``."""
    if num_online < 1:
        raise ValueError(f"num_online: need at least 1 client, got {num_online}")
    s = num_online // 2 + 1 - num_malicious
    return math.exp(-(s**2)) / (2 / math.sqrt(2 * math.pi))


@variant(of="lie", threat_model=THREAT_MODEL)
def lie(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    z: float | None = None,
    num_clients: int | None = None,
    num_malicious: int | None = None,
) -> torch.Tensor:
    """MarsFL's LIE: every malicious row becomes ``mean + z * std`` of the benign updates.

    ``z`` defaults to :func:`lie_z` of ``n = num_clients`` (default: benign plus malicious rows)
    and ``m = num_malicious`` (default: the malicious rows).
    """
    mu, sigma = _benign_stats(benign)
    rows = malicious.shape[0]
    if z is None:
        n = num_clients if num_clients is not None else benign.shape[0] + rows
        z = lie_z(n, num_malicious if num_malicious is not None else rows)
    return (mu + z * sigma).expand(rows, -1).clone()


def _search(feasible: Callable[[float], bool], gamma_init: float, tol: float) -> float:
    """MarsFL's halving search: test ``gamma``, move it up (feasible) or down by half the width,
    halve the width; stop once the width is at most ``tol``. ``0`` (the mean) if nothing passed."""
    if gamma_init <= 0 or tol <= 0:
        raise ValueError(f"gamma_init/tol: must be > 0, got {gamma_init}/{tol}")
    gamma, width, best = gamma_init, gamma_init, 0.0
    while width > tol:  # MarsFL's |lamda_succ - lamda|, which equals this width at every test
        if feasible(gamma):
            best = gamma
            gamma += width / 2
        else:
            gamma -= width / 2
        width /= 2
    return best


@variant(of="min_max", threat_model=THREAT_MODEL)
def min_max(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    direction: str = "std",
    gamma_init: float = 10.0,
    tol: float = 1e-5,
) -> torch.Tensor:
    """MarsFL's Min-Max: ``mean - gamma * dev`` with ``max_i ||mal - b_i|| <= max_{i,j} ||b_i - b_j||``."""
    return _optimised(malicious, benign, _max_distance, direction, gamma_init, tol, pick=max, search=_search)


@variant(of="min_sum", threat_model=THREAT_MODEL)
def min_sum(
    malicious: torch.Tensor,
    benign: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    direction: str = "std",
    gamma_init: float = 10.0,
    tol: float = 1e-5,
) -> torch.Tensor:
    """MarsFL's Min-Sum: ``sum_i ||mal - b_i||^2 <= min_i sum_j ||b_i - b_j||^2`` (the smallest benign score)."""
    return _optimised(malicious, benign, _sum_sq_distance, direction, gamma_init, tol, pick=min, search=_search)


def parameter_mask(state: Mapping[str, torch.Tensor], parameter_names: set[str]) -> torch.Tensor:
    """Which entries of ``flatten_state(state)`` belong to the parameters named (the rest are buffers)."""
    import torch

    return torch.cat([torch.full((torch.as_tensor(t).numel(),), key in parameter_names, dtype=torch.bool)
                      for key, t in state.items()])


def write_into_parameters(crafted: torch.Tensor, honest: torch.Tensor, is_parameter: torch.Tensor) -> torch.Tensor:
    """The uploads MarsFL's write makes, rows ``[m, dim]``: the parameter entries (``is_parameter``,
    in state order) take the first entries of ``crafted``; the buffer entries keep ``honest``."""
    out = honest.clone()
    out[:, is_parameter] = crafted[:, : int(is_parameter.sum())].to(out.dtype)
    return out


def poison_states(
    craft: Callable[..., torch.Tensor],
    states: torch.Tensor,
    global_vector: torch.Tensor,
    malicious_mask: torch.Tensor,
    is_parameter: torch.Tensor,
    generator: torch.Generator | None = None,
    **params,
) -> torch.Tensor:
    """``states`` (full flat states ``[n, dim]``) with the malicious rows replaced by ``craft`` (an
    attack's variant under this threat model, e.g. ``ATTACKS["lie"].variants["marsfl"]``): crafted
    from the benign rows' updates ``states - global_vector``, written as parameters."""
    import torch

    mask = torch.as_tensor(malicious_mask, dtype=torch.bool).reshape(-1)
    if mask.numel() != states.shape[0]:
        raise ValueError(f"malicious_mask: has {mask.numel()} entries, states have {states.shape[0]} rows")
    out = states.clone()
    if bool(mask.any()):
        updates = states - global_vector
        crafted = craft(updates[mask], updates[~mask], generator, **params)
        out[mask] = write_into_parameters(crafted, states[mask], is_parameter)
    return out
