"""The registry of engines, and the checks that run before any of them starts.

`engine_class` finds the engine class that runs an ``engine.type`` from its settings class (see
`testbed.engines.config.registered_engines`), importing it only when a run builds it.
`preflight_engine` answers, from the engine's declared capabilities and without starting anything,
whether the engine can run a kind (one line naming the engines that can), whether the pip extra it
needs is installed, and whether its address answers. `make_engine` builds the engine of a run;
`placement_engine` the one a sweep places its variants with.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence

from testbed.engines.base import Engine
from testbed.engines.config import EngineSettings, registered_engines
from testbed.errors import ScenarioError, UserError
from testbed.plugins import resolve


def engine_class(engine_type: str) -> type[Engine]:
    """The Engine class that runs settings of ``engine_type``, as its settings class names it."""
    runs = registered_engines()[engine_type].engine
    return resolve(runs) if isinstance(runs, str) else runs


def preflight_engine(settings: EngineSettings, kind: str, needs_one_of: Iterable[str], source: str) -> None:
    """Check, without starting anything, that the engine can run ``kind`` and can be reached."""
    needed = frozenset(needs_one_of)
    refusal = settings.refusal(kind, needed)
    if refusal is not None:
        able = [name for name, model in registered_engines().items()
                if model.model_construct(type=name).capabilities() & needed]
        raise ScenarioError(f"{source}: {refusal}; engines that run it: {', '.join(able)}")
    check_extra(settings, source)
    settings.preflight(source)


def check_extra(settings: EngineSettings, source: str) -> None:
    """One line naming the pip extra an engine needs when its package is missing."""
    if settings.extra is not None:
        extra, module = settings.extra
        if importlib.util.find_spec(module) is None:
            raise UserError(f"{source}: engine.type: '{settings.type}' needs the {extra} extra: "
                            f"pip install 'testbed[{extra}]'")


def make_engine(settings: EngineSettings, needs: Iterable[str], parallel_tasks: int, quiet: bool = False,
                worker_code: Sequence[str] = ()) -> Engine:
    """The engine of a run whose kind uses the capabilities ``needs`` and keeps ``parallel_tasks``
    tasks busy at once, and whose workers import the code at ``worker_code`` (`Engine.add_worker_code`)."""
    engine = engine_class(settings.type).build(settings, frozenset(needs), parallel_tasks, quiet)
    if worker_code:
        engine.add_worker_code(worker_code)
    return engine


def placement_engine(settings: EngineSettings) -> Engine:
    """The engine a sweep places its variant processes with (see `Engine.for_placement`)."""
    return engine_class(settings.type).for_placement(settings)
