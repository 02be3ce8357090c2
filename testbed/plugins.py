"""Workloads, strategies and attacks from installed packages, declared through entry points.

A package extends the testbed by declaring entries in its ``pyproject.toml``::

    [project.entry-points."testbed.workloads"]
    my_workload = "my_package.workload:MyWorkload"   # a Workload subclass whose ``name`` is "my_workload"

    [project.entry-points."testbed.strategies"]
    my_rule = "my_package.rules:MY_RULE"             # a testbed.federated.strategies.StrategyEntry

    [project.entry-points."testbed.attacks"]
    my_attack = "my_package.attacks:MY_ATTACK"       # a strategies.Attack

    [project.entry-points."testbed.trackers"]
    my_tracker = "my_package.tracking:MyTracker"     # a testbed.trackers.base.Tracker subclass named "my_tracker"

    [project.entry-points."testbed.datasets"]
    my_source = "my_package.data:MySource"           # a testbed.data.sources.DataSource subclass named "my_source"

Each registry module calls `load_entry_points` once, after its built-in entries, so the plugins
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

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from testbed.errors import UserError

GROUPS = ("testbed.workloads", "testbed.strategies", "testbed.attacks", "testbed.trackers", "testbed.datasets")


def load_entry_points(group: str, registry: dict[str, Any], expected: type, *, as_class: bool = False) -> list[str]:
    """Add every entry point of ``group`` to ``registry``; returns the names added.

    ``expected`` is what an entry must be: a subclass of it (``as_class``) or an instance of it.
    """
    added = []
    for point in sorted(entry_points(group=group), key=lambda p: p.name):
        obj = _load(point, group)
        if registry.get(point.name, obj) is not obj:  # a plugin may register itself, never replace
            raise UserError(f"{_describe(point, group)}: '{point.name}' is already registered; "
                            "a plugin cannot replace an entry, rename it")
        fits = isinstance(obj, type) and issubclass(obj, expected) if as_class else isinstance(obj, expected)
        if not fits:
            kind = f"a subclass of {expected.__name__}" if as_class else f"a {expected.__name__}"
            raise UserError(f"{_describe(point, group)}: {point.value} is not {kind}")
        own_name = getattr(obj, "name", point.name) if as_class else point.name
        if own_name != point.name:
            raise UserError(f"{_describe(point, group)}: the entry point is named '{point.name}' "
                            f"but {point.value} calls itself '{own_name}'")
        registry[point.name] = obj
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
