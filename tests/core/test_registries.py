"""The registries of engines, workloads, partitioners, topologies and attacks are derived from the components.

Each built-in component is one class (a graph builder: one function) that carries its name, its
config and what it offers; the registries and the scenario's config unions are read from them, and
no second table in the code lists the components again. A plugin of each of these groups that fails
to import is refused in one line naming its distribution.
"""

from __future__ import annotations

import ast
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed.data.partition import Partitioner, _partition_union, registered_partitioners
from testbed.decentralized.graphs import registered_topologies
from testbed.engines.base import Engine
from testbed.engines.config import EngineSettings, engine_union, registered_engines
from testbed.engines.registry import engine_class
from testbed.federated.attacks import attack_parameters, registered_attacks
from testbed.strategies import ATTACKS, Attack, attack
from testbed.workloads import registry as workloads

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("testbed", "strategies", "topologies", "cluster")
# The papers' own registry: a paper's id names the paper (and its scenarios), which for a paper with
# one workload is that workload's name; it lists papers, not workloads.
PAPERS = ROOT / "testbed" / "claims" / "papers.py"


def _type_literal(cls: type) -> str:
    """The one value of the class's own ``type: Literal[...]`` annotation."""
    (value,) = typing.get_args(typing.get_type_hints(cls)["type"])
    return value


def _members(union: Any) -> set[type]:
    return set(typing.get_args(typing.get_args(union)[0]))


def test_every_engine_is_read_from_its_own_settings_class():
    engines = registered_engines()

    assert {"local", "ray", "deepspeed", "mpi"} <= set(engines)
    for name, cls in engines.items():
        assert issubclass(cls, EngineSettings) and name == cls.name == _type_literal(cls)
        runs = engine_class(name)  # an Engine subclass, or a factory of them (local: Ray or in-process)
        assert (isinstance(runs, type) and issubclass(runs, Engine)) or callable(runs.build)
        assert callable(runs.for_placement)
        assert cls.model_construct(type=name).capabilities(), f"engine {name} declares no capability"
    assert _members(engine_union()) == set(engines.values())  # the scenario's union is the registry


def test_every_partitioner_is_read_from_its_own_class():
    partitioners = registered_partitioners()

    assert {"iid", "dirichlet", "shards", "pathological", "size", "natural"} <= set(partitioners)
    for name, cls in partitioners.items():
        assert issubclass(cls, Partitioner) and name == cls.name == _type_literal(cls)
        assert cls.split is not Partitioner.split, f"partitioner {name} does not say how it splits"
    assert _members(_partition_union()) == set(partitioners.values())


def test_every_topology_is_registered_under_its_builders_own_name():
    for name, builder in registered_topologies().items():
        assert name == builder.__name__
        assert "seed" in inspect.signature(builder).parameters


def test_every_workload_is_read_from_its_own_package_and_class():
    packages = sorted(p.parent.name for p in (ROOT / "testbed" / "workloads").glob("*/workload.py"))

    assert list(workloads.BUILTIN) == packages
    for name in workloads.BUILTIN:
        cls = workloads.workload_class(name)
        assert cls.name == name
        assert workloads.config_class(name) is cls.Config  # the config module's class is the class's Config
        assert workloads.check_function(name) is cls.check
        federated = any(base.__name__ == "FederatedWorkload" for base in cls.__mro__)
        assert workloads.kinds(name) == (("workload", "federated") if federated else ("workload",))
        assert workloads.summary(name)


def test_every_attack_is_its_own_declared_function():
    for name, declared in ATTACKS.items():
        assert isinstance(declared, Attack) and declared.name == name
        module = declared.fn.__module__
        # Declared where its function is written: the module holds the Attack under the function's name.
        assert getattr(__import__(module, fromlist=["_"]), declared.fn.__name__) is declared, name
    assert {name for name, a in ATTACKS.items() if a.omniscient} == {"lie", "min_max", "min_sum"}
    assert {name for name, a in ATTACKS.items() if a.full_model} == {"random_noise", "add_noise"}
    # A threat model's variant is declared on the attack it varies and takes every setting it takes
    # (MarsFL's LIE also takes the attackers' count, which the server supplies).
    for name, declared in ATTACKS.items():
        for variant in declared.variants.values():
            assert set(attack_parameters(declared.fn)) <= set(attack_parameters(variant)), name
    assert {name for name, a in ATTACKS.items() if "marsfl" in a.variants} == {"lie", "min_max", "min_sum"}


def test_an_attack_declared_twice_under_one_name_is_refused_as_a_plugin_would_be(monkeypatch):
    @attack("model", name="sign_flip")
    def impostor(malicious, benign, generator=None):
        return malicious

    monkeypatch.setitem(ATTACKS, "impostor", impostor)  # a second declaration of the name 'sign_flip'
    registered_attacks.cache_clear()
    try:
        with pytest.raises(Exception, match="the entry is named|already registered|calls itself"):
            registered_attacks()
    finally:
        registered_attacks.cache_clear()


def _displays(tree: ast.AST) -> list[tuple[int, bool, set[str]]]:
    """(line, whether it is a dict, its string constants) of every dict's keys and every list, tuple
    and set display."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            items: list[ast.expr | None] = list(node.keys)
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = list(node.elts)
        else:
            continue
        strings = {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}
        found.append((node.lineno, isinstance(node, ast.Dict), strings))
    return found


def test_no_second_table_in_the_code_lists_the_components():
    """A mapping keyed by two names of one kind, or a list of three, is a table kept beside the classes
    (the old ``ENGINES``, ``EngineSettingsTypes``, ``PARTITIONERS``, ``BUILTIN``, ``GRAPH_BUILDERS``,
    ``ATTACKS`` and ``MARSFL_ATTACKS``)."""
    kinds = {"engines": set(registered_engines()), "partitioners": set(registered_partitioners()),
             "topologies": set(registered_topologies()), "workloads": set(workloads.BUILTIN),
             "attacks": set(ATTACKS)}
    tables = []
    for path in (path for folder in SOURCES for path in (ROOT / folder).rglob("*.py") if path != PAPERS):
        for line, is_dict, strings in _displays(ast.parse(path.read_text(), str(path))):
            for kind, names in kinds.items():
                if len(names & strings) >= (2 if is_dict else 3):
                    tables.append(f"{path.relative_to(ROOT)}:{line} lists {kind} {sorted(names & strings)}")

    assert tables == []


# --- a plugin that fails to import ----------------------------------------------------------------------

CACHED: dict[str, Callable[..., Any]] = {
    "testbed.engines": registered_engines, "testbed.partitioners": registered_partitioners,
    "testbed.topologies": registered_topologies, "testbed.attacks": registered_attacks,
}


@pytest.fixture
def broken_distribution(tmp_path, monkeypatch):
    """An installed distribution ``broken-components`` whose entry point of each group names a missing module."""
    info = tmp_path / "broken_components-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-components\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\nbroken = broken_components_missing.{group.split('.')[1]}:Thing\n" for group in CACHED))
    monkeypatch.syspath_prepend(str(tmp_path))
    for registry in CACHED.values():
        registry.cache_clear()
    yield
    for registry in CACHED.values():
        registry.cache_clear()  # the next test reads the registries without the broken package


@pytest.mark.parametrize("what", ["engines", "partitioners", "topologies", "attacks"])
def test_a_plugin_that_fails_to_import_is_refused_in_one_line_naming_its_distribution(broken_distribution, cli,
                                                                                        what):
    code, out, err = cli("list", what)

    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"plugin 'broken' (testbed.{what}, from broken-components): cannot be loaded (ModuleNotFoundError" in err
