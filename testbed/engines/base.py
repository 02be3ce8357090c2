"""The engine interface, the in-process engine, and the choice of engine for a scenario.

An engine runs plain Python functions on workers and returns their results in order
(`Engine.map`). Functions and their arguments must be picklable and must not depend on the
process they run in, which is what makes the same scenario give the same numbers on any engine.
"""

from __future__ import annotations

import importlib.util
import subprocess
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

from testbed.errors import UserError
from testbed.scenario import EngineConfig


class Engine(ABC):
    """Places work on workers. Use as a context manager: started on enter, shut down on exit."""

    name: str = "engine"

    def __enter__(self) -> "Engine":
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def start(self) -> None:
        """Acquire workers (start or join Ray, ...)."""

    def shutdown(self) -> None:
        """Release what `start` acquired."""

    @abstractmethod
    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple]) -> list[Any]:
        """Run ``fn(*args)`` for each tuple, in parallel where the engine can; results in order."""

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one call of ``fn`` on a worker."""
        return self.map(fn, [args])[0]

    def describe(self) -> dict[str, Any]:
        """What the engine ran on, for summary.json."""
        return {"type": self.name}

    @property
    def ray_address(self) -> str | None:
        """The Ray cluster this engine uses, for components that drive Ray themselves (Flower)."""
        return None


class InProcessEngine(Engine):
    """Runs every call in this process, one after another: no Ray, nothing to start."""

    name = "inprocess"

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple]) -> list[Any]:
        return [fn(*args) for args in arg_tuples]


class LauncherEngine(InProcessEngine):
    """For the ``deepspeed`` engine: the runner starts the launcher itself (see
    `testbed.pretrain.launch`); calls made through this engine run in the driver."""

    def __init__(self, config: EngineConfig):
        self.name = config.type
        self.config = config

    def start(self) -> None:
        # At start, not in `validate`: checking a hostfile means connecting to its hosts.
        if getattr(self.config, "hostfile", None):
            check_hosts_reachable(self.config.hostfile)

    def describe(self) -> dict[str, Any]:
        return {"type": self.name, "num_procs": self.config.num_procs}


def make_engine(config: EngineConfig, parallel_tasks: int, quiet: bool = False) -> Engine:
    """The engine a scenario's ``engine:`` block asks for.

    ``local`` with ``use_ray: auto`` starts Ray in-process only when the run has more than one
    task to run at once; a single training loop gains nothing from Ray's start-up cost.
    """
    from testbed.engines.ray_engine import LocalRayEngine, RayClusterEngine

    if config.type == "local":
        wants_ray = config.use_ray == "always" or (config.use_ray == "auto" and parallel_tasks > 1)
        if not wants_ray:
            return InProcessEngine()
        return LocalRayEngine(config.num_cpus, quiet, config.dashboard_host if config.dashboard else None)
    if config.type == "ray":
        return RayClusterEngine(config.address, config.num_cpus_per_task, quiet)
    if config.type == "deepspeed":
        return LauncherEngine(config)
    if config.type == "mpi":
        from testbed.engines.mpi_engine import MpiEngine

        return MpiEngine(config.num_procs, config.hosts, quiet)
    raise UserError(f"engine.type: '{config.type}' runs only under its launcher and is not available for this kind yet")


def preflight_engine(config: EngineConfig, source: str) -> None:
    """Check, without starting anything, that the engine can be reached."""
    if config.type == "ray":
        from testbed.engines.ray_engine import check_ray_address

        check_ray_address(config.address, source)
    if config.type == "local" and config.dashboard and importlib.util.find_spec("aiohttp_cors") is None:
        raise UserError(f"{source}: engine.dashboard: Ray's dashboard needs its extra packages: "
                        "pip install 'ray[default]'")


def check_hosts_reachable(hostfile: str) -> None:
    """The deepspeed launcher reaches every host of a hostfile, localhost included, by passwordless
    SSH (pdsh): check that first, so a missing key is one line here, not a launcher traceback."""
    from cluster.hostfiles import hosts_from_file

    for host in hosts_from_file(hostfile):
        command = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host.name, "true"]
        try:
            reached = subprocess.run(command, capture_output=True, timeout=15).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            reached = False
        if not reached:
            raise UserError(f"{hostfile}: engine.hostfile: host {host.name!r} is not reachable by "
                            "passwordless SSH, which the deepspeed launcher needs; set up SSH keys, or drop "
                            "engine.hostfile to run num_procs processes on this machine")
