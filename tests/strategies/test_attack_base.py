"""`strategies.attack_base`: an attack is its decorated function, and the registry is derived from
the modules that declare attacks, with each threat model's variant filed under the attack it varies."""

from __future__ import annotations

from types import ModuleType

import pytest

from testbed.strategies.attack_base import Attack, Variant, attack, derive_attacks, variant


def _module(**objects) -> ModuleType:
    module = ModuleType("declared")
    vars(module).update(objects)
    return module


@attack("model", omniscient=True)
def push(malicious, benign, generator=None, *, scale: float = 1.0):
    return malicious * scale


@variant(of="push", threat_model="other")
def push_other(malicious, benign, generator=None, *, scale: float = 1.0):
    return malicious * -scale


def test_the_decorator_declares_the_function_under_its_own_name_and_keeps_it_callable():
    assert isinstance(push, Attack) and push.name == "push" and push.kind == "model" and push.omniscient
    assert push(3.0, None, scale=2.0) == 6.0  # called as the function it was
    assert attack("data", name="renamed")(lambda labels, n, g: labels).name == "renamed"
    with pytest.raises(ValueError, match="kind"):
        attack("weights")(lambda x: x)


def test_the_registry_is_every_declared_attack_with_its_variants_filed_under_it():
    plain = attack("model")(lambda malicious, benign, generator=None: malicious)
    registry = derive_attacks(_module(push=push, push_other=push_other, plain=plain, helper=len))

    assert set(registry) == {"push", "<lambda>"} and registry["push"] is push
    assert isinstance(push_other, Variant) and push.variants == {"other": push_other.fn}
    assert push_other(2.0, None) == -2.0


def test_a_variant_of_an_unknown_attack_or_a_second_one_under_a_threat_model_is_refused():
    orphan = variant(of="nothing", threat_model="other")(lambda m, b, g=None: m)
    with pytest.raises(ValueError, match="unknown attack 'nothing'"):
        derive_attacks(_module(push=push, orphan=orphan))
    rival = variant(of="push", threat_model="other")(lambda m, b, g=None: -m)
    with pytest.raises(ValueError, match="two variants under threat model 'other'"):
        derive_attacks(_module(push=push, push_other=push_other, rival=rival))
