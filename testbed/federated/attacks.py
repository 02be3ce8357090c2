"""The attacks a federated scenario can name: the library's `ATTACKS` plus installed plugins.

The `testbed.strategies` library stands alone (it imports nothing from the testbed), so the
`testbed.attacks` entry-point group is read here, once per process, by the code that resolves a
scenario's ``federated.attack.name`` (the checks, the clients, the server).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, PydanticSchemaGenerationError, TypeAdapter, create_model

from testbed.config import StrictModel
from testbed.plugins import declare
from testbed.strategies.attacks import ATTACKS, Attack


@cache
def registered_attacks() -> dict[str, Attack]:
    """Every attack by name: the built-in ones, then those installed packages declare."""
    registry = declare("testbed.attacks", list(ATTACKS.values()), Attack, as_class=False)
    # The library's own functions (`poison_updates`, `get_attack`) look attacks up in ATTACKS: the
    # plugins join it there, so a plugin attack runs through them like a built-in one.
    ATTACKS.update(registry)
    return ATTACKS


# Attack-function parameters that the server supplies itself.
INTERNAL_ATTACK_PARAMS = frozenset({"init", "num_clients"})


def attack_parameters(fn: Callable[..., Any]) -> list[str]:
    """The keyword parameters a scenario may set for an attack function."""
    return [name for name, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in INTERNAL_ATTACK_PARAMS]


class AttackParams(StrictModel):
    """Base of the typed parameters of an attack. Strict: the server passes the scenario's values to
    the attack function as they are, so a value must already have the type the function declares."""

    model_config = ConfigDict(strict=True)


@cache
def attack_config(name: str) -> type[BaseModel]:
    """The typed config of attack ``name``'s parameters, built from its function's signature: each
    keyword parameter's annotation is its type (Any where it has none pydantic knows) and its
    default is its default."""
    fn = registered_attacks()[name].fn
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a plugin's annotation that does not resolve: its parameters stay untyped
        hints = {}
    parameters = inspect.signature(fn).parameters
    fields: dict[str, Any] = {}
    for key in attack_parameters(fn):
        annotation = hints.get(key, Any)
        try:
            TypeAdapter(annotation)
        except PydanticSchemaGenerationError:
            annotation = Any
        default = parameters[key].default
        fields[key] = (annotation, ... if default is inspect.Parameter.empty else default)
    return create_model(f"{name}_attack_params", __base__=AttackParams, **fields)


def check_attack_values(name: str, params: dict[str, Any]) -> None:
    """Play attack ``name`` once on a tiny input, so that its own checks (a scale that must be
    positive, a direction it does not know) refuse a bad value now rather than in the first round;
    raises their ValueError."""
    import torch

    entry = registered_attacks()[name]
    parameters = inspect.signature(entry.fn).parameters
    generator = torch.Generator().manual_seed(0)
    if entry.kind == "data":
        entry.fn(torch.tensor([0, 1, 0, 1]), 2, generator, **params)
        return
    if entry.kind == "backdoor":  # the target and the trigger's size against the data: `check_backdoor_data`
        target = params.get("target", 0)
        classes = max(2, target + 1) if isinstance(target, int) else 2
        entry.fn(torch.zeros(4, 64), torch.tensor([0, 1, 0, 1]), classes, generator, **params)
        return
    internal: dict[str, Any] = {}
    if "init" in parameters:
        internal["init"] = torch.zeros(3)
    if "num_clients" in parameters:
        internal["num_clients"] = 4
    entry.fn(torch.zeros(1, 3), torch.arange(9.0).reshape(3, 3), generator, **internal, **params)


def check_backdoor_data(name: str, params: dict[str, Any], x: Any, y: Any, num_classes: int) -> None:
    """Play backdoor attack ``name`` on a few of the scenario's own samples (numpy ``x``, ``y``), so a
    target that is no class of the data or a trigger larger than its images is refused before the
    run; raises their ValueError."""
    import torch

    entry = registered_attacks()[name]
    entry.fn(torch.from_numpy(x[:4]), torch.from_numpy(y[:4]), num_classes, torch.Generator().manual_seed(0), **params)
