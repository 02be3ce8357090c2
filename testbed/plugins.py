"""The one loader of every component registry: the built-ins, then installed packages through entry points.

A package extends the testbed by declaring entries in its ``pyproject.toml``::

    [project.entry-points."testbed.workloads"]
    my_workload = "my_package.workload:MyWorkload"   # a Workload subclass whose ``name`` is "my_workload"

    [project.entry-points."testbed.strategies"]
    my_rule = "my_package.rules:MyRule"              # a testbed.federated.strategies.StrategyPlugin named "my_rule"

    [project.entry-points."testbed.attacks"]
    my_attack = "my_package.attacks:my_attack"       # a function declared @testbed.strategies.attack(kind)

    [project.entry-points."testbed.trackers"]
    my_tracker = "my_package.tracking:MyTracker"     # a testbed.trackers.base.Tracker subclass named "my_tracker"

    [project.entry-points."testbed.datasets"]
    my_source = "my_package.data:MySource"           # a testbed.data.sources.DataSource subclass named "my_source"

    [project.entry-points."testbed.engines"]
    my_engine = "my_package.engine:MySettings"       # an EngineSettings subclass whose type is "my_engine"

    [project.entry-points."testbed.partitioners"]
    my_split = "my_package.split:MySplit"            # a testbed.data.partition.Partitioner, type "my_split"

    [project.entry-points."testbed.topologies"]
    my_graph = "my_package.graphs:my_graph"          # a graph builder function named my_graph (see topologies.graphs)

Each registry module calls `declare` once: it admits the built-in entries and then the plugins
through the same checks (a name of its own, the expected type, no name taken twice), so the plugins
are there in every process that uses the registry (the CLI, Ray workers, MPI ranks). This and the
registries are how code reaches a run: a scenario file names registered entries, so installing a
package is the trust decision, not writing a scenario. The one exception is a classifier's own
network, ``workload.model: "package.module:Class"`` (like Hydra's ``_target_``): a scenario that names
one imports and runs that package's code, so run scenarios you trust. `testbed.workloads.usermodel`
calls the attribute only if it is a ``torch.nn.Module`` subclass, and refuses the standard library
and ``testbed`` itself.
A plugin may not replace a built-in entry, and a plugin that fails to import stops the testbed
with a one-line error naming it, rather than leaving a scenario to fail later with "unknown name".
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from types import FunctionType
from typing import Any, get_args

from testbed.errors import UserError

GROUPS = ("testbed.workloads", "testbed.strategies", "testbed.attacks", "testbed.trackers", "testbed.datasets",
          "testbed.engines", "testbed.partitioners", "testbed.topologies")


def resolve(target: str) -> Any:
    """The attribute a ``module:attribute`` string names, importing its module (the one resolver of
    the lazily imported tables: kinds, report layouts, engines, workloads)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def declare(group: str, builtins: Iterable[Any], expected: type, *, as_class: bool = True) -> dict[str, Any]:
    """The registry of ``group``: each built-in under the name it carries (`own_name`), then every
    installed plugin of the group, all admitted by the same `admit`. ``expected`` is what an entry
    must be: a subclass of it (``as_class``) or an instance of it (a function, for graph builders)."""
    registry: dict[str, Any] = {}
    for obj in builtins:
        admit(registry, own_name(obj), obj, expected, f"built-in {group} entry", as_class=as_class)
    load_entry_points(group, registry, expected, as_class=as_class)
    return registry


def own_name(obj: Any) -> str:
    """The name a component carries: its ``name`` attribute, else its ``__name__`` (a function)."""
    return getattr(obj, "name", None) or obj.__name__


def literal_name(cls: Any, field: str = "type") -> str:
    """The one value of a pydantic model's ``field: Literal["..."]`` annotation: the name a settings
    class (an engine's, a partitioner's) carries without repeating it ("" where there is not one)."""
    values = get_args(cls.model_fields[field].annotation)
    return str(values[0]) if len(values) == 1 else ""


def admit(registry: dict[str, Any], name: str, obj: Any, expected: type, where: str, *, as_class: bool,
          shown: str | None = None) -> None:
    """Add ``obj`` as ``name`` after the checks every entry passes, built-in or plugin; otherwise one
    line naming ``where`` it comes from (``shown``: how to call the object there)."""
    shown = shown or getattr(obj, "__qualname__", repr(obj))
    if registry.get(name, obj) is not obj:  # a plugin may register itself, never replace
        raise UserError(f"{where}: '{name}' is already registered; a plugin cannot replace an entry, rename it")
    fits = isinstance(obj, type) and issubclass(obj, expected) if as_class else isinstance(obj, expected)
    if not fits:
        kind = f"a subclass of {expected.__name__}" if as_class else f"a {expected.__name__}"
        raise UserError(f"{where}: {shown} is not {kind}")
    # A class or an instance (an attack) calls itself by its ``name`` (none: the entry's), a function
    # by its own name.
    called = obj.__name__ if isinstance(obj, FunctionType) else getattr(obj, "name", name)
    if called != name:
        raise UserError(f"{where}: the entry is named '{name}' but {shown} calls itself '{called}'")
    registry[name] = obj


def load_entry_points(group: str, registry: dict[str, Any], expected: type, *, as_class: bool = False) -> list[str]:
    """Add every entry point of ``group`` to ``registry``; returns the names added.

    ``expected`` is what an entry must be: a subclass of it (``as_class``) or an instance of it.
    """
    added = []
    for point in sorted(entry_points(group=group), key=lambda p: p.name):
        admit(registry, point.name, _load(point, group), expected, _describe(point, group), as_class=as_class,
              shown=point.value)
        added.append(point.name)
    return added


def _load(point: EntryPoint, group: str) -> Any:
    try:
        return point.load()
    except Exception as err:  # any failure of foreign code: name the plugin, not our traceback
        raise UserError(f"{_describe(point, group)}: cannot be loaded ({type(err).__name__}: {err}); "
                        "fix or uninstall that package") from None


def _describe(point: EntryPoint, group: str) -> str:
    package = point.dist.name if point.dist is not None else "an unknown package"
    return f"plugin '{point.name}' ({group}, from {package})"
