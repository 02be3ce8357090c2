"""Engines on Ray: ``local`` starts Ray in-process; ``ray`` joins an existing cluster by address.

Every task runs with one CPU thread for torch (see `testbed.determinism`), so a task computes
the same floats on a Ray worker of any node as in the driver process. Training programs run as
Ray Train workers (`TorchTrainer`) on the ``ray`` engine, and as one local rank on ``local``.
On ``ray``, code the run's workers import that the cluster's nodes do not have installed (a user's
model package) goes with the job as Ray's ``py_modules`` (`Engine.add_worker_code`).
"""

from __future__ import annotations

import logging
import os
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from testbed.cluster.addresses import check_ray_address
from testbed.console import divert_ray_workers
from testbed.engines.base import ActorGroup, Engine, InProcessEngine, PlacementEngine
from testbed.engines.config import LocalEngineConfig, RayEngineConfig
from testbed.engines.jobs import DistributedProgram, Job
from testbed.errors import UserError

if TYPE_CHECKING:
    from ray.actor import ActorClass


class RayActors(ActorGroup):
    """Ray actors, one per worker, spread over the cluster's nodes."""

    def __init__(self, cls: type, arg_tuples: Sequence[tuple]):
        import ray

        remote: ActorClass[Any] = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(cls)
        self.handles = [remote.remote(*args) for args in arg_tuples]

    def __len__(self) -> int:
        return len(self.handles)

    def call(self, index: int, method: str, *args: Any) -> Any:
        return getattr(self.handles[index], method).remote(*args)

    def close(self) -> None:
        import ray

        for handle in self.handles:
            ray.kill(handle)  # type: ignore[arg-type]  # ray types remote() as ActorHandle | type


class _RayEngine(Engine):
    """Shared task submission for both Ray engines."""

    def __init__(self, settings: LocalEngineConfig | RayEngineConfig, num_cpus_per_task: float, quiet: bool):
        super().__init__(settings)
        self.num_cpus_per_task = num_cpus_per_task
        self.quiet = quiet
        self._owns_ray = False
        self._cluster: dict[str, Any] = {}

    @abstractmethod
    def _init_args(self) -> dict[str, Any]:
        """The ``ray.init`` arguments that reach this engine's Ray."""

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            # Keep Ray from rewriting CUDA_VISIBLE_DEVICES for CPU-only tasks (and from warning about it).
            os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
            ray.init(**self._init_args(), logging_level=logging.ERROR, log_to_driver=not self.quiet,
                     configure_logging=True)
            divert_ray_workers()  # into the run's log, unless --verbose
            self._owns_ray = True
        if not self._cluster:
            # Described now, also where this process's Ray was started before (a sweep's shared
            # process, `testbed.sweep_shared`): components that drive Ray themselves (Flower) shut it
            # down when they finish.
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            self._cluster = {"nodes": len(nodes), "cpus": sum(n["Resources"].get("CPU", 0) for n in nodes)}

    def shutdown(self) -> None:
        import ray

        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], *, parallel: int | None = None,
            cpus: float | None = None) -> list[Any]:
        import ray

        remote = ray.remote(num_cpus=self.num_cpus_per_task if cpus is None else cpus, max_retries=2)(fn)
        step = parallel or len(arg_tuples) or 1
        results: list[Any] = []
        for start in range(0, len(arg_tuples), step):
            refs = [remote.remote(*args) for args in arg_tuples[start : start + step]]
            try:
                results += ray.get(refs)
            except ray.exceptions.RayTaskError as err:
                raise err.as_instanceof_cause() from None
        return results

    def workers(self) -> int:
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def largest_node_cpus(self) -> float:
        import ray

        return max((float(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")), default=0.0)

    def actors(self, cls: type, arg_tuples: Sequence[tuple]) -> ActorGroup:
        return RayActors(cls, arg_tuples)

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def get(self, futures: Any) -> Any:
        import ray

        return ray.get(futures)

    def describe(self) -> dict[str, Any]:
        return {"type": self.name, **self._cluster}


class LocalEngine:
    """The ``local`` engine: Ray in-process (`LocalRayEngine`) when the run has parallel work or
    needs a Ray cluster (Flower), else everything in this process (`InProcessEngine`): a single
    training loop gains nothing from Ray's start-up cost."""

    @staticmethod
    def build(settings: LocalEngineConfig, needs: frozenset[str], parallel_tasks: int, quiet: bool) -> Engine:
        wants_ray = settings.use_ray == "always" or (
            settings.use_ray == "auto" and (parallel_tasks > 1 or "ray" in needs))
        return LocalRayEngine(settings, quiet) if wants_ray else InProcessEngine(settings)

    @staticmethod
    def for_placement(settings: LocalEngineConfig) -> Engine:
        return PlacementEngine(settings)


class LocalRayEngine(_RayEngine):
    """Ray started inside this process on this machine: the embedded default."""

    name = "local"
    settings: LocalEngineConfig

    def __init__(self, settings: LocalEngineConfig, quiet: bool):
        super().__init__(settings, 1.0, quiet)
        self.num_cpus = settings.num_cpus or os.cpu_count() or 1
        self._adopting = False
        self._preexisting: set[int] = set()

    def start(self) -> None:
        # Ray's servers (GCS, raylet, object manager, runtime-env agent, every worker's gRPC) listen
        # on loopback only when the node's IP is 127.0.0.1, else on all interfaces. On Linux,
        # ray.init replaces a loopback _node_ip_address by the machine's routable address unless
        # multi-node clusters are off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, Ray's default on macOS
        # and Windows, read once when Ray is imported): off, then, while this Ray starts.
        from ray._private import ray_constants

        multi_node = getattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
        ray_constants.ENABLE_RAY_CLUSTER = False
        self._begin_adopting()
        try:
            super().start()
        except BaseException:
            self._end_adopting()
            raise
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = multi_node

    def shutdown(self) -> None:
        super().shutdown()
        self._end_adopting()

    def _begin_adopting(self) -> None:
        """Before this engine starts Ray: have Ray's processes re-parented to this process, not to
        init, when their parent exits. After ray.shutdown (ours, or Flower's at the end of its
        simulation) Ray's agents and workers poll for their dead raylet for seconds; adopted, they
        can still be found below this process and stopped."""
        import ray

        from testbed.engines.proctree import descendants, set_child_subreaper

        if not ray.is_initialized():
            self._preexisting = descendants()
            self._adopting = set_child_subreaper(True)

    def _end_adopting(self) -> None:
        """Once Ray is shut down: stop what is left of its processes (after a second's grace)."""
        from testbed.engines.proctree import set_child_subreaper, stop_leftovers

        if self._adopting:
            stop_leftovers(self._preexisting, is_ray_process)
            set_child_subreaper(False)
            self._adopting = False

    def _init_args(self) -> dict[str, Any]:
        # address "local": without it ray.init joins whatever cluster /tmp/ray/ray_current_cluster
        # names (a `testbed cluster up` or `ray start --head` on this machine) instead of starting
        # Ray here. The node is 127.0.0.1 (see `start`): nothing it serves is reachable from
        # another machine. No dashboard unless asked for (it listens on a port and adds seconds to
        # start-up); when asked for, on loopback unless the scenario names another interface.
        args: dict[str, Any] = {"address": "local", "_node_ip_address": "127.0.0.1", "num_cpus": self.num_cpus,
                                "include_dashboard": False}
        if self.settings.dashboard:
            args.update(include_dashboard=True, dashboard_host=self.settings.dashboard_host)
        return args

    def launch(self, program: DistributedProgram) -> Job:
        from testbed.engines.processes import single_rank_job

        return single_rank_job(program)


def is_ray_process(command_line: str) -> bool:
    """Whether a command line is one of Ray's processes (raylet, GCS, agents, ``ray::`` workers)."""
    return command_line.startswith("ray::") or f"{os.sep}ray{os.sep}" in command_line


class RayClusterEngine(_RayEngine):
    """Joins a running Ray cluster (``ray start --head``, ``ray up``, Slurm) by address."""

    name = "ray"
    settings: RayEngineConfig

    def __init__(self, settings: RayEngineConfig, quiet: bool, num_cpus_per_task: float | None = None):
        super().__init__(settings, settings.num_cpus_per_task if num_cpus_per_task is None else num_cpus_per_task,
                         quiet)
        self._py_modules: list[str] = []

    @classmethod
    def build(cls, settings: RayEngineConfig, needs: frozenset[str], parallel_tasks: int, quiet: bool) -> Engine:
        return cls(settings, quiet)

    @classmethod
    def for_placement(cls, settings: RayEngineConfig) -> Engine:
        return RayPlacementEngine(settings)

    def add_worker_code(self, paths: Sequence[str]) -> None:
        self._py_modules += paths

    def _init_args(self) -> dict[str, Any]:
        # The cluster's nodes were started before this run, with their own environment and maybe on
        # other machines: code the workers need that is not installed there goes with the job (Ray
        # uploads each folder or file once and puts it on the path of every worker of this job).
        shipped = {"runtime_env": {"py_modules": self._py_modules}} if self._py_modules else {}
        return {"address": self.settings.address, **shipped}

    def start(self) -> None:
        check_ray_address(self.settings.address, "engine")
        try:
            super().start()
        except ConnectionError as err:
            raise UserError(
                f"engine.address: cannot join the Ray cluster at '{self.settings.address}': {err}") from None

    def launch(self, program: DistributedProgram) -> Job:
        return RayTrainJob(program)


class RayPlacementEngine(RayClusterEngine):
    """Places a sweep's variants on the cluster: `map` starts one placement host per machine (a Ray
    actor, on one of its nodes) and shares the ``parallel`` calls at once among them by their CPUs;
    each host runs its calls in threads, each waiting on its variant's process, as `PlacementEngine`
    does on this machine. So each machine has one warm server (`testbed.engines.warm`), which forks
    every variant placed there: a forked process shares memory only with a parent on its machine,
    and each more server would cost the seconds of imports again. A host reserves no CPU: the
    variant's own process joins the cluster and asks for the CPUs its work needs (a placement that
    held one could starve it on a full cluster). The hosts are killed when `map` ends, also on
    Ctrl-C, and their servers go with them (variants still running then get SIGINT and stop as an
    interrupted run does); a host lost with its node is restarted elsewhere and its calls retried
    (each variant resumes from its folder)."""

    def __init__(self, settings: RayEngineConfig):
        super().__init__(settings, quiet=True, num_cpus_per_task=0)

    def map(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], *, parallel: int | None = None,
            cpus: float | None = None) -> list[Any]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not arg_tuples:
            return []
        placement = machine_slots(ray.nodes(), min(parallel or len(arg_tuples), len(arg_tuples)))
        remote = ray.remote(PlacementHost)
        hosts: list[Any] = [
            remote.options(num_cpus=0, max_concurrency=slots, max_restarts=2, max_task_retries=2,
                           scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote()
            for node, slots in placement]
        free = [slots for _, slots in placement]
        results: list[Any] = [None] * len(arg_tuples)
        waiting = list(enumerate(arg_tuples))[::-1]
        running: dict[Any, int] = {}  # call -> its host
        try:
            while waiting or running:
                for host, handle in enumerate(hosts):
                    while free[host] and waiting:
                        running[handle.call.remote(fn, *waiting.pop())] = host
                        free[host] -= 1
                done, _ = ray.wait(list(running), num_returns=1)
                free[running.pop(done[0])] += 1
                index, result = ray.get(done[0])
                results[index] = result
        except ray.exceptions.RayTaskError as err:
            raise err.as_instanceof_cause() from None
        finally:
            for handle in hosts:
                ray.kill(handle)
        return results


def machine_slots(nodes: list[dict[str, Any]], parallel: int) -> list[tuple[str, int]]:
    """``parallel`` slots shared among the machines of a cluster by their CPUs (largest
    remainders), as ``(node id, slots)``: per machine, its node with the most CPUs; machines that
    get no slot are left out. ``nodes`` as `ray.nodes` gives them."""
    machines: dict[str, list[dict[str, Any]]] = {}
    for node in nodes:
        if node.get("Alive"):
            machines.setdefault(node["NodeManagerAddress"], []).append(node)
    cpus = {address: sum(n["Resources"].get("CPU", 0.0) for n in group) for address, group in machines.items()}
    total = sum(cpus.values())
    shares = {address: parallel * (cpus[address] / total if total else 1 / len(machines)) for address in machines}
    slots = {address: int(share) for address, share in shares.items()}
    for address in sorted(shares, key=lambda a: shares[a] - slots[a], reverse=True)[:parallel - sum(slots.values())]:
        slots[address] += 1
    return [(max(machines[address], key=lambda n: n["Resources"].get("CPU", 0.0))["NodeID"], count)
            for address, count in slots.items() if count]


class PlacementHost:
    """A machine's placement host for `RayPlacementEngine`: runs the calls it is given, as many at
    once as its actor's ``max_concurrency`` (threads)."""

    def call(self, fn: Callable[..., Any], index: int, args: tuple) -> tuple[int, Any]:
        return index, fn(*args)


class RayTrainJob(Job):
    """A `DistributedProgram` as Ray Train workers: `TorchTrainer` sets up the process group (gloo
    without GPUs) and each worker calls the program module's ``main(args)``."""

    def __init__(self, program: DistributedProgram):
        import ray
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        use_gpu = ray.cluster_resources().get("GPU", 0) >= program.ranks
        env = {**program.env, **({} if use_gpu else {"DS_ACCELERATOR": "cpu"})}
        trainer = TorchTrainer(
            run_program_rank,
            train_loop_config={"module": program.module, "args": list(program.args), "env": env},
            scaling_config=ScalingConfig(num_workers=program.ranks, use_gpu=use_gpu),
            run_config=RunConfig(name="program", storage_path=str((program.work_dir / "ray").resolve())),
        )
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._fit, args=(trainer,), daemon=True)
        self.thread.start()

    def _fit(self, trainer: Any) -> None:
        try:
            trainer.fit()
        except BaseException as err:  # handed to the driver's thread by raise_for_status
            self.error = err

    def finished(self) -> bool:
        return not self.thread.is_alive()

    def stop(self) -> None:
        """Ray Train stops its workers when the driver's Ray shuts down (the engine's exit)."""

    def raise_for_status(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"Ray Train run failed: {self.error}") from self.error


def run_program_rank(loop_config: dict[str, Any]) -> None:
    """One Ray Train worker of a `DistributedProgram`."""
    import importlib

    os.environ.update(loop_config["env"])
    code = importlib.import_module(loop_config["module"]).main(loop_config["args"])
    if code:
        raise RuntimeError(f"{loop_config['module']} exited with code {code}")
