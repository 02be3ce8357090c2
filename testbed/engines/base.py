"""The engine interface: the few primitives every kind's runner uses to place its work.

An engine is built from the scenario's ``engine:`` block (`testbed.engines.registry.make_engine`)
and used as a context manager (started on enter, everything it started stopped on exit). Its
primitives, each offered where `EngineSettings.capabilities` says so:

- `map(fn, arg_tuples)` / `call(fn, *args)`: independent calls, results in order (``tasks``; an
  engine without it runs them in the driver process);
- `actors(cls, arg_tuples)`: a group of long-lived stateful workers the driver calls (``actors``);
- `spmd(fn, *args)`: ``fn(comm, *args)`` on every rank of a persistent group, where ``comm`` is the
  group's communicator (mpi4py's interface); returns rank 0's result (``spmd``);
- `launch(program)`: a torch.distributed program of N ranks, as a `Job` (``torch_distributed``);
- ``ray``: a Ray cluster connected in this process, for libraries that drive Ray themselves.

Functions and their arguments must be picklable and must not depend on the process they run in,
which is what makes the same scenario give the same numbers on any engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from testbed.engines.config import EngineSettings
from testbed.engines.jobs import DistributedProgram, Job


class ActorGroup(ABC):
    """Long-lived workers, each hosting one object; calls return futures for `Engine.get`."""

    @abstractmethod
    def __len__(self) -> int:
        """How many workers the group has."""

    @abstractmethod
    def call(self, index: int, method: str, *args: Any) -> Any:
        """Call ``method`` of worker ``index``; arguments may be futures of earlier calls."""

    def broadcast(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` with the same arguments on every worker."""
        return [self.call(index, method, *args) for index in range(len(self))]

    @abstractmethod
    def close(self) -> None:
        """Stop every worker."""


class Engine(ABC):  # noqa: B024  (every primitive has a default; the ABC marks the interface)
    """Places a run's work on workers. Use as a context manager: started on enter, shut down on exit."""

    name: str = "engine"

    def __init__(self, settings: EngineSettings):
        self.settings = settings

    @classmethod
    def build(cls, settings: Any, needs: frozenset[str], parallel_tasks: int, quiet: bool) -> Engine:
        """The engine for a run that uses the capabilities ``needs`` with ``parallel_tasks`` at once."""
        return cls(settings)

    @classmethod
    def for_placement(cls, settings: Any) -> Engine:
        """The engine a sweep places its variants with: by default threads on this machine, each
        waiting on its variant's ``testbed`` process (`PlacementEngine`)."""
        return PlacementEngine(settings)

    def add_worker_code(self, paths: Sequence[str]) -> None:  # noqa: B027  (the default needs nothing)
        """Before `start`: code outside the installed packages that the run's workers import (a
        user's model package: a folder, or a module file). Engines whose workers may run on other
        machines send it there (``ray``); by default the workers are this machine's processes, which
        find it on the path the driver found it on (`testbed.workloads.usermodel`)."""

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: Any) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.abort()
        else:
            self.shutdown()

    def start(self) -> None:  # noqa: B027  (engines with nothing to acquire keep this no-op)
        """Acquire workers (start or join Ray, launch ranks, ...)."""

    def shutdown(self) -> None:  # noqa: B027  (engines with nothing to release keep this no-op)
        """Release what `start` acquired."""

    def abort(self) -> None:
        """Release what `start` acquired at once, without waiting for work in flight: the run
        was interrupted (Ctrl-C) and continues from its last checkpoint. By default `shutdown`."""
        self.shutdown()

    def offers(self, capability: str) -> bool:
        """Whether this started engine offers ``capability`` (see `testbed.engines.config`)."""
        return capability in self.capabilities()

    def capabilities(self) -> frozenset[str]:
        return self.settings.capabilities()

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], *, parallel: int | None = None,
            cpus: float | None = None) -> list[Any]:
        """Run ``fn(*args)`` for each tuple, at most ``parallel`` at once, each reserving ``cpus``
        CPUs where the engine reserves resources; results in order. By default in this process,
        one after another, or in ``parallel`` threads (for calls that wait on child processes)."""
        if parallel is None or parallel <= 1:
            return [fn(*args) for args in arg_tuples]
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            return list(pool.map(lambda args: fn(*args), arg_tuples))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one call of ``fn`` on a worker."""
        return self.map(fn, [args])[0]

    def workers(self) -> int:
        """How many workers calls can be spread over (CPUs of the cluster, ranks, ...)."""
        return 1

    def largest_node_cpus(self) -> float:
        """The CPUs of the engine's largest machine: no single worker can reserve more."""
        import os

        return float(os.cpu_count() or 1)

    def actors(self, cls: type, arg_tuples: Sequence[tuple]) -> ActorGroup:
        """One worker per tuple, each hosting ``cls(*args)``, spread over the engine's machines."""
        raise self._not_offered("actors")

    def put(self, value: Any) -> Any:
        """A handle to ``value`` that actor calls can share without copying it per call."""
        return value

    def get(self, futures: Any) -> Any:
        """The values of futures returned by `ActorGroup.call` (one, or a list)."""
        return futures

    def spmd(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(comm, *args)`` on every rank; returns rank 0's result."""
        raise self._not_offered("spmd")

    def launch(self, program: DistributedProgram) -> Job:
        """Start ``program`` on the engine's ranks."""
        raise self._not_offered("torch_distributed")

    def describe(self) -> dict[str, Any]:
        """What the engine ran on, for summary.json."""
        return {"type": self.name}

    def _not_offered(self, capability: str) -> RuntimeError:
        return RuntimeError(f"engine '{self.name}' does not offer {capability!r}; validate checks this "
                            "before a run, so a runner asked for what its kind did not declare")


class InProcessEngine(Engine):
    """Runs every call in this process: no Ray, nothing to start. Training programs run as one
    local process (a single torch.distributed rank)."""

    name = "inprocess"

    def capabilities(self) -> frozenset[str]:
        return frozenset({"tasks", "torch_distributed"})

    def launch(self, program: DistributedProgram) -> Job:
        from testbed.engines.processes import single_rank_job

        return single_rank_job(program)


class PlacementEngine(InProcessEngine):
    """Places a sweep's variant processes on this machine: one thread waits on each. The warm
    servers they are forked from (`testbed.engines.warm`) stop when it does, unless a
    `testbed.engines.warm.servers_kept` block keeps them for the next sweep."""

    name = "placement"

    def shutdown(self) -> None:
        from testbed.engines.warm import release_warm_servers

        release_warm_servers()
