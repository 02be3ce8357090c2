"""Engines on Ray: ``local`` starts Ray in-process; ``ray`` joins an existing cluster by address.

Every task runs with one CPU thread for torch (see `testbed.determinism`), so a task computes
the same floats on a Ray worker of any node as in the driver process.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
import os
import socket
from pathlib import Path
from typing import Any, Callable, Sequence

from testbed.engines.base import Engine
from testbed.errors import UserError

RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


class _RayEngine(Engine):
    """Shared task submission for both Ray engines."""

    def __init__(self, num_cpus_per_task: float, quiet: bool):
        self.num_cpus_per_task = num_cpus_per_task
        self.quiet = quiet
        self._owns_ray = False
        self._cluster: dict[str, Any] = {}

    @abstractmethod
    def _init_args(self) -> dict[str, Any]:
        """The ``ray.init`` arguments that reach this engine's Ray."""

    def start(self) -> None:
        import ray

        if ray.is_initialized():
            return
        # Keep Ray from rewriting CUDA_VISIBLE_DEVICES for CPU-only tasks (and from warning about it).
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        ray.init(**self._init_args(), logging_level=logging.ERROR, log_to_driver=not self.quiet,
                 configure_logging=True)
        self._owns_ray = True
        # Described now: components that drive Ray themselves (Flower) shut it down when they finish.
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self._cluster = {"nodes": len(nodes), "cpus": sum(n["Resources"].get("CPU", 0) for n in nodes)}

    def shutdown(self) -> None:
        import ray

        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple]) -> list[Any]:
        import ray

        remote = ray.remote(num_cpus=self.num_cpus_per_task, max_retries=2)(fn)
        refs = [remote.remote(*args) for args in arg_tuples]
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as err:
            raise err.as_instanceof_cause() from None

    def describe(self) -> dict[str, Any]:
        return {"type": self.name, **self._cluster}

    @property
    def ray_address(self) -> str | None:
        import ray

        return ray.get_runtime_context().gcs_address if ray.is_initialized() else None


class LocalRayEngine(_RayEngine):
    """Ray started inside this process on this machine: the embedded default."""

    name = "local"

    def __init__(self, num_cpus: int | None, quiet: bool, dashboard_host: str | None = None):
        super().__init__(1.0, quiet)
        self.num_cpus = num_cpus or os.cpu_count() or 1
        self.dashboard_host = dashboard_host

    def _init_args(self) -> dict[str, Any]:
        # address "local": without it ray.init joins whatever cluster /tmp/ray/ray_current_cluster
        # names (a `testbed cluster up` or `ray start --head` on this machine) instead of starting
        # Ray here. No dashboard unless asked for (it listens on a port and adds seconds to
        # start-up); when asked for, on loopback unless the scenario names another interface.
        args: dict[str, Any] = {"address": "local", "num_cpus": self.num_cpus, "include_dashboard": False}
        if self.dashboard_host is not None:
            args.update(include_dashboard=True, dashboard_host=self.dashboard_host)
        return args


class RayClusterEngine(_RayEngine):
    """Joins a running Ray cluster (``ray start --head``, ``ray up``, Slurm) by address."""

    name = "ray"

    def __init__(self, address: str, num_cpus_per_task: float, quiet: bool):
        super().__init__(num_cpus_per_task, quiet)
        self.address = address

    def _init_args(self) -> dict[str, Any]:
        return {"address": self.address}

    def start(self) -> None:
        check_ray_address(self.address, "engine")
        try:
            super().start()
        except ConnectionError as err:
            raise UserError(f"engine.address: cannot join the Ray cluster at '{self.address}': {err}") from None


def resolve_auto_address() -> str | None:
    """The address ``ray.init(address='auto')`` would use: $RAY_ADDRESS, else the local head's."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    if RAY_CURRENT_CLUSTER.is_file():
        return RAY_CURRENT_CLUSTER.read_text().strip() or None
    return None


def check_ray_address(address: str, source: str, timeout_s: float = 3.0) -> None:
    """Fail with a clear user error unless something listens at the cluster address."""
    resolved = resolve_auto_address() if address == "auto" else address
    if not resolved:
        raise UserError(f"{source}: engine.address: 'auto' found no running Ray cluster "
                        "(start one with 'ray start --head' or set RAY_ADDRESS)")
    hostport = resolved.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{source}: engine.address: '{address}' is not host:port or ray://host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError:
        raise UserError(f"{source}: engine.address: no Ray cluster answers at {hostport}") from None
