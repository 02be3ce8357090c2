"""Byzantine client behaviours: data poisoning and model poisoning, in one registry.

Each attack is declared where its function is written (`attack_base.attack`); ``ATTACKS`` maps
every declared name to its :class:`Attack`, gathered from this module and the ones it imports.
Three kinds exist:

* ``kind="data"``: ``fn(labels, num_classes, generator, **params) -> labels``,
  applied to a malicious client's training labels before local training.
  ``pair_flip`` (class ``c -> c+1 mod C``) and ``sym_flip`` (to a uniformly
  drawn other class), each with probability ``rate`` (0.5 in SDEA's code),
  after Han et al. 2018 ("Co-teaching") as used by SDEA (Huang et al. 2024).
* ``kind="model"``: ``fn(malicious, benign, generator, **params) -> rows``,
  replacing the ``[m, dim]`` uploads of the malicious clients. ``malicious``
  holds what those clients would honestly have sent; ``benign`` the benign
  uploads of the round, read only by the ``omniscient`` attacks (LIE, Min-Max,
  Min-Sum; see :mod:`strategies.omniscient`): those model an omniscient
  adversary that sees every benign update of the round.

* ``kind="backdoor"``: ``fn(x, y, num_classes, generator, **params) -> (x, y)``,
  applied to a malicious client's training data (inputs and labels) before local
  training: ``badnets`` and ``model_replacement`` (:mod:`strategies.backdoor`),
  the latter's upload then boosted (``Attack.boosted``, :func:`strategies.backdoor.scale_update`).

Model attacks act on update vectors ``theta_k - theta_global`` except
``random_noise`` and ``add_noise``, whose ``init`` is a full parameter vector
and which therefore expect full parameter vectors (see
:func:`random_model_vector`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import backdoor, marsfl, omniscient
from .attack_base import Attack, attack, derive_attacks, unchecked

if TYPE_CHECKING:  # the declarations import no torch (validation reads them); the functions do
    import torch
    from torch import Generator, Tensor


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate: must be in [0, 1], got {rate}")


def _check_labels(labels: Tensor, num_classes: int) -> None:
    if num_classes < 2:
        raise ValueError(f"num_classes: must be >= 2, got {num_classes}")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        lo, hi = int(labels.min()), int(labels.max())
        raise ValueError(f"labels: must lie in [0, {num_classes}), got range [{lo}, {hi}]")


@attack("data", check=_check_rate)
def pair_flip(labels: Tensor, num_classes: int, generator: Generator, *, rate: float = 0.5) -> Tensor:
    """Pair flipping: each label ``c`` becomes ``(c + 1) mod C`` with probability ``rate``."""
    import torch

    _check_rate(rate)
    _check_labels(labels, num_classes)
    flip = torch.rand(labels.shape, generator=generator) < rate
    return torch.where(flip, (labels + 1) % num_classes, labels)


@attack("data", check=_check_rate)
def sym_flip(labels: Tensor, num_classes: int, generator: Generator, *, rate: float = 0.5) -> Tensor:
    """Symmetric flipping: with probability ``rate`` a label moves to a uniformly drawn *other* class."""
    import torch

    _check_rate(rate)
    _check_labels(labels, num_classes)
    flip = torch.rand(labels.shape, generator=generator) < rate
    # An offset in 1..C-1 reaches every other class with equal probability.
    offset = torch.randint(1, num_classes, labels.shape, generator=generator)
    return torch.where(flip, (labels + offset) % num_classes, labels)


def _check_scale(scale: float) -> None:
    if scale <= 0:
        raise ValueError(f"scale: must be > 0, got {scale}")


@attack("model", check=_check_scale)
def sign_flip(
    malicious: Tensor, benign: Tensor, generator: Generator | None = None, *, scale: float = 1.0
) -> Tensor:
    """Sign flipping: send ``-scale * update`` (scale 1 reverses the client's own update)."""
    _check_scale(scale)
    return -scale * malicious


def _check_sigma(sigma: float) -> None:
    if sigma <= 0:
        raise ValueError(f"sigma: must be > 0, got {sigma}")


@attack("model", check=_check_sigma)
def gaussian(
    malicious: Tensor,
    benign: Tensor,
    generator: Generator | None = None,
    *,
    sigma: float = 1.0,
    mean: float = 0.0,
) -> Tensor:
    """Gaussian noise: replace each upload by i.i.d. ``N(mean, sigma^2)`` noise."""
    import torch

    _check_sigma(sigma)
    noise = torch.randn(malicious.shape, generator=generator, dtype=malicious.dtype)
    return mean + sigma * noise


def _check_init(malicious: Tensor, init: Tensor | None) -> Tensor:
    import torch

    if init is None:
        raise ValueError("init: required, a flat random-model vector (see random_model_vector)")
    init = torch.as_tensor(init, dtype=malicious.dtype).reshape(-1)
    if init.numel() != malicious.shape[1]:
        raise ValueError(f"init: has {init.numel()} entries, uploads have {malicious.shape[1]}")
    return init


@attack("model", name="random_noise", full_model=True, check=unchecked)  # SDEA's "RanN"
def random_model(
    malicious: Tensor, benign: Tensor, generator: Generator | None = None, *, init: Tensor | None = None
) -> Tensor:
    """Random noise ("RanN" in SDEA): upload an untrained, randomly initialised model ``init``.

    SDEA's code draws that model once, so the same ``init`` is sent every round.
    """
    return _check_init(malicious, init).expand(malicious.shape[0], -1).clone()


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha: must be in [0, 1], got {alpha}")


@attack("model", full_model=True, check=_check_alpha)
def add_noise(
    malicious: Tensor,
    benign: Tensor,
    generator: Generator | None = None,
    *,
    init: Tensor | None = None,
    alpha: float = 0.5,
) -> Tensor:
    """AddNoise (SDEA's code): move the upload toward a random model, ``theta + alpha (init - theta)``."""
    _check_alpha(alpha)
    return malicious + alpha * (_check_init(malicious, init) - malicious)


def random_model_vector(model_fn: Callable[[], torch.nn.Module], seed: int) -> Tensor:
    """Flat state (parameters and buffers) of a fresh ``model_fn()`` built under ``seed``.

    The global RNG is forked, so calling this does not disturb other random streams.
    """
    import torch

    from .vectors import flatten_state

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return flatten_state(model_fn().state_dict())


# Declared here and in the modules of the omniscient, backdoor and MarsFL attacks.
ATTACKS: dict[str, Attack] = derive_attacks(sys.modules[__name__], omniscient, backdoor, marsfl)


def get_attack(name: str, kind: str | None = None) -> Attack:
    """The registered attack ``name``; if ``kind`` is given it must match."""
    valid = sorted(k for k, a in ATTACKS.items() if kind is None or a.kind == kind)
    if name not in valid:
        raise ValueError(f"name: unknown {kind or ''} attack {name!r}; valid: {valid}")
    return ATTACKS[name]


def poison_labels(
    name: str, labels: Tensor, num_classes: int, generator: Generator, **params: float
) -> Tensor:
    """Apply the data attack ``name`` to ``labels``."""
    return get_attack(name, "data")(labels, num_classes, generator, **params)


def poison_data(
    name: str, x: Tensor, y: Tensor, num_classes: int, generator: Generator, **params: float
) -> tuple[Tensor, Tensor]:
    """Apply the backdoor attack ``name`` to a client's inputs ``x`` and labels ``y``."""
    return get_attack(name, "backdoor")(x, y, num_classes, generator, **params)


def poison_updates(
    name: str,
    updates: Tensor,
    malicious_mask: Tensor,
    generator: Generator | None = None,
    **params,
) -> Tensor:
    """Return ``updates`` with the rows in ``malicious_mask`` replaced by model attack ``name``.

    The benign rows (``~malicious_mask``) are what omniscient attacks observe.
    """
    import torch

    attack = get_attack(name, "model")
    mask = torch.as_tensor(malicious_mask, dtype=torch.bool).reshape(-1)
    if mask.numel() != updates.shape[0]:
        raise ValueError(f"malicious_mask: has {mask.numel()} entries, updates have {updates.shape[0]} rows")
    out = updates.clone()
    if bool(mask.any()):
        out[mask] = attack(updates[mask], updates[~mask], generator, **params).to(updates.dtype)
    return out
