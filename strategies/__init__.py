"""Flower strategies (SDEA and robust baselines) and Byzantine attacks, installed as `testbed.strategies`.

A library: it imports nothing else of the testbed, so it serves any Flower app.

Layout:

* :mod:`testbed.strategies.robust` -- pure aggregation rules on a ``[n_clients, dim]``
  update matrix (``mean``, ``dnc``, ``rfa``, ``fltrust``).
* :mod:`testbed.strategies.attacks` -- data and model attacks, each declared with
  ``@attack(kind)`` (:mod:`testbed.strategies.attack_base`), registry ``ATTACKS`` derived
  (omniscient LIE / Min-Max / Min-Sum live in :mod:`testbed.strategies.omniscient`).
* :mod:`testbed.strategies.sdea` -- SDEA's learned weights (``sdea_weights``) and
  :mod:`testbed.strategies.finch` -- the FINCH clustering it uses.
* :mod:`testbed.strategies.flower` -- Flower 1.42 Message-API strategies ``SDEA``,
  ``DnC``, ``RFA``, ``FLTrust`` (``from testbed.strategies import SDEA``), built on
  :class:`testbed.strategies.base.RobustFedAvg` (deterministic reply order, per-round
  ``history`` of client weights and flags, optional server-side attack).
* :mod:`testbed.strategies.vectors` -- state dict <-> flat vector conversions.
* :mod:`testbed.strategies.backdoor` -- BadNets trigger, model replacement, attack success rate.
* :mod:`testbed.strategies.mods` -- the attacks in any Flower app: ``byzantine_mod`` (a client
  mod), ``poisoned_data`` (its data hook) and ``ServerSideAttackStrategy`` (the omniscient ones).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .attack_base import attack
    from .attacks import ATTACKS, Attack, poison_labels, poison_updates, random_model_vector
    from .base import RobustFedAvg, ServerSideAttack
    from .flower import RFA, SDEA, DnC, FLTrust
    from .mods import ServerSideAttackStrategy, byzantine_mod, poisoned_data
    from .robust import Aggregate
    from .sdea import sdea_weights

# Each name's module, imported on first use (PEP 562): a light reader (the testbed's validation reads
# the attack declarations) then loads neither torch nor Flower, which the strategies themselves need.
_HOMES = {
    "attack": "attack_base", "ATTACKS": "attacks", "Attack": "attacks", "poison_labels": "attacks",
    "poison_updates": "attacks", "random_model_vector": "attacks", "RobustFedAvg": "base",
    "ServerSideAttack": "base", "RFA": "flower", "SDEA": "flower", "DnC": "flower", "FLTrust": "flower",
    "ServerSideAttackStrategy": "mods", "byzantine_mod": "mods", "poisoned_data": "mods", "Aggregate": "robust",
    "sdea_weights": "sdea",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = [
    "ATTACKS",
    "Aggregate",
    "Attack",
    "attack",
    "DnC",
    "FLTrust",
    "RFA",
    "RobustFedAvg",
    "SDEA",
    "ServerSideAttack",
    "ServerSideAttackStrategy",
    "byzantine_mod",
    "poison_labels",
    "poison_updates",
    "poisoned_data",
    "random_model_vector",
    "sdea_weights",
]
