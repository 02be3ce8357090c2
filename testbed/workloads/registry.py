"""The registry of scenario workloads, derived from the workload packages: no table lists them.

A built-in workload is a package ``testbed/workloads/<name>/`` (found on disk: `BUILTIN`) with
``config.py`` (its typed ``<Prefix>Config``, the class whose name is ``<name>config`` in any case,
and ``check``), ``workload.py`` (the `Workload` subclass whose ``name`` is ``<name>`` and whose
``Config`` and ``check`` are those two), ``metrics.py`` where it has metrics of its own, and
``report.py`` for its report sections. Its summary is the first paragraph of the package's
docstring. The config module also declares what the registry must tell without the model code:
the kinds the workload runs under (``KINDS``, default ``("workload",)``; every workload runs as a
``workload`` scenario, a `FederatedWorkload` also under ``federated``) and the audits it offers
(``AUDITS``: ``report:`` key to ``"module:Class"``, the audit's own module, imported only when that
audit is looked up). Validating a scenario and listing the workloads import only the package and its
torch-free ``config`` module; the model code (torch and the rest) is imported when a run builds the
workload. The class takes both from the config module when it is created
(`testbed.workloads.base.Workload.__init_subclass__`), so a class that disagrees with ``KINDS``
fails at import. Installed packages add workloads through the
``testbed.workloads`` entry-point group (see `testbed.plugins`); their class carries its own
``Config``, ``check`` and ``summary``, and passes the same checks as a built-in class
(`testbed.plugins.admit`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from testbed.config import StrictModel
    from testbed.data.config import DataConfig
    from testbed.workloads.audits import Audit
    from testbed.workloads.base import Workload

_HERE = Path(__file__).parent
# The built-in workloads: every package of this folder with a ``workload`` module, in name order.
BUILTIN: tuple[str, ...] = tuple(sorted(info.name for info in pkgutil.iter_modules([str(_HERE)])
                                        if info.ispkg and (_HERE / info.name / "workload.py").is_file()))


def _module(name: str, module: str) -> ModuleType:
    return importlib.import_module(f"testbed.workloads.{name}.{module}" if module else f"testbed.workloads.{name}")


@cache
def _builtin(name: str) -> type[Workload]:
    """The class of built-in workload ``name``: the `Workload` subclass its package's ``workload``
    module defines under that name, admitted as a plugin's class would be."""
    from testbed.plugins import admit
    from testbed.workloads.base import Workload

    module = _module(name, "workload")
    own = [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, Workload)
           and obj.__module__ == module.__name__ and getattr(obj, "name", None) == name]
    if len(own) != 1:
        raise TypeError(f"{module.__name__} defines {len(own)} Workload classes named '{name}'; it needs one")
    registry: dict[str, Any] = {}
    admit(registry, name, own[0], Workload, f"built-in workload {module.__name__}", as_class=True)
    return registry[name]


def _builtin_config(name: str) -> type[StrictModel]:
    """The config class of built-in workload ``name``: ``<name>config`` in its config module."""
    module = _module(name, "config")
    found = [obj for attribute, obj in vars(module).items() if attribute.lower() == f"{name}config"]
    if len(found) != 1:
        raise TypeError(f"{module.__name__} has no class '{name}config' (in any case): the workload's Config")
    return found[0]


@cache
def _plugins() -> dict[str, type[Workload]]:
    from importlib.metadata import entry_points

    from testbed.plugins import load_entry_points

    if not entry_points(group="testbed.workloads"):
        return {}  # none installed: spare listing and validating the import of the workload base (torch)
    from testbed.workloads.base import Workload

    found: dict[str, Any] = dict.fromkeys(BUILTIN)  # a plugin may not take a built-in name
    added = load_entry_points("testbed.workloads", found, Workload, as_class=True)
    return {name: found[name] for name in added}


def workload_names() -> list[str]:
    """Every registered workload, built-in first, then plugins."""
    return list(BUILTIN) + sorted(_plugins())


def is_registered(name: str) -> bool:
    return name in BUILTIN or name in _plugins()


def summary(name: str) -> str:
    """What workload ``name`` is, in one paragraph: its package's docstring (built-in) or its
    class's ``summary`` (plugin)."""
    if name not in BUILTIN:
        return _plugins()[name].summary
    paragraph = (_module(name, "").__doc__ or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def config_class(name: str) -> type[StrictModel]:
    """The typed config of workload ``name`` (a built-in's: imports only its config module)."""
    return _builtin_config(name) if name in BUILTIN else _plugins()[name].Config


def check_function(name: str) -> Callable[[Any, DataConfig], None]:
    """The check of workload ``name``: rejects config/data combinations that cannot work."""
    return _module(name, "config").check if name in BUILTIN else _plugins()[name].check


def kinds(name: str) -> tuple[str, ...]:
    """The scenario kinds workload ``name`` runs under: a built-in's as its torch-free config module
    declares them (``KINDS``, default ``("workload",)``), a plugin's as its class does (imports it)."""
    if name in BUILTIN:
        return tuple(getattr(_module(name, "config"), "KINDS", ("workload",)))
    from testbed.workloads.base import FederatedWorkload

    return ("workload", "federated") if issubclass(workload_class(name), FederatedWorkload) else ("workload",)


def audit_names(name: str) -> tuple[str, ...]:
    """The ``report:`` keys of the audits workload ``name`` offers (a built-in's: imports no audit)."""
    return tuple(_declared_audits(name) if name in BUILTIN else _plugins()[name].audits)


def audits(name: str) -> dict[str, type[Audit]]:
    """The audits workload ``name`` offers, by ``report:`` key: a built-in's as its config module
    declares them (``AUDITS``), each imported from its own module, which imports no model code; a
    plugin's as its class does (`testbed.workloads.audits.find_audit` checks that each is an `Audit`)."""
    if name not in BUILTIN:
        return dict(_plugins()[name].audits)
    return {key: pkgutil.resolve_name(reference) for key, reference in _declared_audits(name).items()}


def _declared_audits(name: str) -> dict[str, str]:
    return dict(getattr(_module(name, "config"), "AUDITS", {}))


def is_federated(name: str) -> bool:
    """Whether federated clients can train workload ``name``'s model."""
    return "federated" in kinds(name)


def workload_class(name: str) -> type[Workload]:
    """The `Workload` class of ``name`` (imports its model code)."""
    return _builtin(name) if name in BUILTIN else _plugins()[name]
