"""The attacks a federated scenario can name: the library's `ATTACKS` plus installed plugins.

The `testbed.strategies` library stands alone (it imports nothing from the testbed), so the
`testbed.attacks` entry-point group is read here, once per process, by the code that resolves a
scenario's ``federated.attack.name`` (the checks, the clients, the server).
"""

from __future__ import annotations

import inspect
import types
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
    parameters = inspect.signature(fn).parameters
    fields: dict[str, Any] = {}
    for key in attack_parameters(fn):
        annotation = _parameter_hint(fn, key)
        try:
            TypeAdapter(annotation)
        except PydanticSchemaGenerationError:
            annotation = Any
        default = parameters[key].default
        fields[key] = (annotation, ... if default is inspect.Parameter.empty else default)
    return create_model(f"{name}_attack_params", __base__=AttackParams, **fields)


def _parameter_hint(fn: Callable[..., Any], key: str) -> Any:
    """The type of ``fn``'s parameter ``key``, resolved alone: the tensors the function's other
    arguments are annotated with then need no torch (their names exist only for type checkers), and
    an annotation that does not resolve (a plugin's) leaves the parameter untyped (Any)."""
    annotation = getattr(fn, "__annotations__", {}).get(key, Any)
    alone = types.SimpleNamespace(__annotations__={key: annotation}, __globals__=getattr(fn, "__globals__", {}))
    try:
        return typing.get_type_hints(alone).get(key, Any)
    except Exception:  # a plugin's annotation that does not resolve: the parameter stays untyped
        return Any


def _run_check(entry: Attack, params: dict[str, Any], **data: Any) -> None:
    """Call the attack's declared ``check`` with the parameters it names: the scenario's, the
    function's defaults for the rest, and ``data`` (a backdoor's ``num_classes`` and sample ``shape``)."""
    assert entry.check is not None  # an attack that declares its checks
    defaults = {key: p.default for key, p in inspect.signature(entry.fn).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty}
    values = {**defaults, **params, **data}
    named = inspect.signature(entry.check).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in named.values())
    entry.check(**{key: value for key, value in values.items() if takes_all or key in named})


def check_attack_values(name: str, params: dict[str, Any]) -> None:
    """Refuse a bad value (a scale that must be positive, a direction it does not know) now rather
    than in the first round, with the attack's own message: its declared ``check`` (no torch), or,
    for a plugin that declares none, the attack played once on a tiny input; raises their ValueError.
    A backdoor's target and trigger are checked against the data by `check_backdoor_data`."""
    entry = registered_attacks()[name]
    if entry.check is not None:
        if entry.kind == "backdoor":  # any target is a class of some data here: the data's own check follows
            target = params.get("target", 0)
            classes = max(2, target + 1) if isinstance(target, int) else 2
            _run_check(entry, params, num_classes=classes, shape=(64,))
        else:
            _run_check(entry, params)
        return
    _play_attack(entry, params)


def _play_attack(entry: Attack, params: dict[str, Any]) -> None:
    """Play an attack that declares no checks once on a tiny input, so that its own checks run."""
    import torch

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


def check_backdoor_data(name: str, params: dict[str, Any], num_classes: int, shape: tuple[int, ...]) -> None:
    """Refuse a backdoor whose target is no class of the scenario's data (``num_classes``) or whose
    trigger is larger than its samples (one sample's ``shape``): the attack's declared check, or, for
    a plugin that declares none, the attack played on zero samples of that shape; raises their ValueError."""
    import numpy as np

    entry = registered_attacks()[name]
    if entry.check is not None:
        _run_check(entry, params, num_classes=num_classes, shape=tuple(shape))
        return
    import torch

    x, y = torch.from_numpy(np.zeros((4, *shape), np.float32)), torch.from_numpy(np.zeros(4, np.int64))
    entry.fn(x, y, num_classes, torch.Generator().manual_seed(0), **params)
