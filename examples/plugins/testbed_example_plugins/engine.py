"""Engine ``process_pool``: a run's independent calls on a pool of local worker processes.

One file holds the whole engine: its settings (the scenario's ``engine:`` block, whose ``type``
literal is the engine's name, with the capabilities it offers) and the `Engine` that runs them.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, ClassVar, Literal

from pydantic import Field

from testbed.engines.base import Engine
from testbed.engines.config import EngineClass, EngineSettings


class ProcessPoolSettings(EngineSettings):
    """Example plugin: independent calls on a pool of local worker processes (concurrent.futures)."""

    type: Literal["process_pool"]
    processes: int = Field(2, gt=0, description="worker processes")
    engine: ClassVar[EngineClass] = "testbed_example_plugins.engine:ProcessPoolEngine"

    def capabilities(self) -> frozenset[str]:
        return frozenset({"tasks"})  # `map` only: the kinds that need it (workload, decentralized) run on it


class ProcessPoolEngine(Engine):
    """Calls ``fn(*args)`` in worker processes started fresh ("spawn": nothing inherited from the driver)."""

    name = "process_pool"
    settings: ProcessPoolSettings

    def start(self) -> None:
        self.pool = ProcessPoolExecutor(self.settings.processes, mp_context=multiprocessing.get_context("spawn"))

    def shutdown(self) -> None:
        self.pool.shutdown()

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], *, parallel: int | None = None,
            cpus: float | None = None) -> list[Any]:
        futures = [self.pool.submit(fn, *args) for args in arg_tuples]
        return [future.result() for future in futures]

    def workers(self) -> int:
        return self.settings.processes
