"""The attacks a federated scenario can name: the library's `ATTACKS` plus installed plugins.

The `testbed.strategies` library stands alone (it imports nothing from the testbed), so the
`testbed.attacks` entry-point group is read here, once per process, by the code that resolves a
scenario's ``federated.attack.name`` (the checks, the clients, the server).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from testbed.plugins import load_entry_points
from testbed.strategies.attacks import ATTACKS, Attack


@cache
def registered_attacks() -> dict[str, Attack]:
    """Every attack by name: the built-in ones, then those installed packages declare."""
    load_entry_points("testbed.attacks", ATTACKS, Attack)
    return ATTACKS


# Attack-function parameters that the server supplies itself.
INTERNAL_ATTACK_PARAMS = frozenset({"init", "num_clients"})


def attack_parameters(fn: Callable[..., Any]) -> list[str]:
    """The keyword parameters a scenario may set for an attack function."""
    return [name for name, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in INTERNAL_ATTACK_PARAMS]
