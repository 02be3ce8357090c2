"""What declares an attack: the `attack` decorator, which makes a function an :class:`Attack`.

An attack is declared once, where its function is written: its name (the function's, unless
given), its kind and its capabilities ride on the decorator, and its typed parameters are the
function's keyword-only arguments (the testbed reads them from the signature), and the checks of
their values ride on it too (``check``), so a scenario's values are checked without torch. The registry
``ATTACKS`` (:mod:`testbed.strategies.attacks`) is derived from these declarations, and a variant
of an attack under another threat model (:mod:`testbed.strategies.marsfl`) is declared with
`variant`, naming the attack it varies; `derive_attacks` files it there, not a table beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

KINDS = ("data", "model", "backdoor")


@dataclass(frozen=True)
class Attack:
    """A declared attack: its ``name``, its ``kind`` ("data"/"model"/"backdoor"), its function,
    whether it is omniscient (reads the round's benign uploads), whether its upload is boosted
    (model replacement), whether a model attack writes whole models (``full_model``: ``fn`` gets the
    states and ``init``, the round-0 model) rather than updates, and its ``variants``: the function
    under each other threat model that changes it (threat model -> function, same signature).

    ``check`` refuses out-of-range parameter values without running the attack (so without torch):
    it is called with the keyword parameters its signature names, defaults filled in (a backdoor's
    also gets the data's ``num_classes`` and one sample's ``shape``), and raises ValueError("param:
    why"), the message the function itself gives; `unchecked` for an attack whose every value of the
    declared types is valid; None (a plugin that declares none) leaves the testbed to play the
    function once on a tiny input.

    Calling an Attack calls its function, so a declared attack is used like the function it was."""

    name: str
    kind: str
    fn: Callable[..., Any]  # data and model attacks return a Tensor, backdoor attacks (x, y)
    omniscient: bool = False
    boosted: bool = False
    full_model: bool = False
    variants: dict[str, Callable[..., Any]] = field(default_factory=dict, compare=False, hash=False)
    check: Callable[..., None] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: one of {list(KINDS)}, got {self.kind!r}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def attack(kind: str, *, name: str | None = None, omniscient: bool = False, boosted: bool = False,
           full_model: bool = False,
           check: Callable[..., None] | None = None) -> Callable[[Callable[..., Any]], Attack]:
    """Declare the decorated function an attack of ``kind``, named ``name`` (default: its own), whose
    parameter values ``check`` refuses (`Attack`)."""

    def declare(fn: Callable[..., Any]) -> Attack:
        return Attack(name or fn.__name__, kind, fn, omniscient=omniscient, boosted=boosted, full_model=full_model,
                      check=check)

    return declare


def unchecked(**params: Any) -> None:
    """The ``check`` of an attack whose every parameter value of the declared types is valid."""


@dataclass(frozen=True)
class Variant:
    """A function declared as attack ``of``'s behaviour under ``threat_model`` (same signature);
    calling it calls the function. `derive_attacks` files it under ``of``'s ``variants``."""

    of: str
    threat_model: str
    fn: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def variant(of: str, threat_model: str) -> Callable[[Callable[..., Any]], Variant]:
    """Declare the decorated function attack ``of``'s behaviour under ``threat_model``."""

    def declare(fn: Callable[..., Any]) -> Variant:
        return Variant(of, threat_model, fn)

    return declare


def derive_attacks(*modules: ModuleType) -> dict[str, Attack]:
    """Every attack the modules declare, by name, with the variants they declare filed under it."""
    found = [obj for module in modules for obj in vars(module).values()]
    attacks = {obj.name: obj for obj in found if isinstance(obj, Attack)}
    for declared in (obj for obj in found if isinstance(obj, Variant)):
        if declared.of not in attacks:
            raise ValueError(f"a variant of unknown attack {declared.of!r} under {declared.threat_model!r}")
        if attacks[declared.of].variants.get(declared.threat_model, declared.fn) is not declared.fn:
            raise ValueError(f"{declared.of}: two variants under threat model {declared.threat_model!r}")
        attacks[declared.of].variants[declared.threat_model] = declared.fn
    return attacks
