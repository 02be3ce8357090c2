"""The ``engine:`` block of a scenario: one typed config per engine, and what each engine offers.

An engine is declared once, by its settings class: the ``type`` literal is its name, the class
carries its capabilities and names the `testbed.engines.base.Engine` class that runs it (``engine``,
a ``module:Class`` string imported only when a run builds it, or the class itself).
`registered_engines` derives the registry from these classes and the ``testbed.engines`` plugins,
and the scenario's `EngineConfig` union is built from that registry. Each config says, without
starting anything, which primitives its engine offers (`capabilities`), how many training ranks it
runs (`ranks`), what it checks before a run (`check`) and the environment a child ``testbed``
process gets (`child_environment`). The kinds ask these questions instead of branching on the
engine's type. Importing this module imports pydantic only.

Capabilities (the primitives of `testbed.engines.base.Engine`):

- ``tasks``: `Engine.map` places independent calls on workers (elsewhere they run in the driver);
- ``actors``: `Engine.actors` hosts long-lived stateful workers the driver calls;
- ``ray``: a Ray cluster is connected in this process, for libraries that drive Ray themselves
  (Flower's simulation engine);
- ``spmd``: `Engine.spmd` runs one function on every rank of a persistent group with a
  communicator (MPI ranks);
- ``torch_distributed``: `Engine.launch` starts a torch.distributed program of N ranks.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, field_validator

from testbed.config import StrictModel
from testbed.errors import ScenarioError, UserError, shorten
from testbed.plugins import declare, literal_name

CAPABILITIES = ("tasks", "actors", "ray", "spmd", "torch_distributed")
# An Engine class or its ``module:Class`` (named here: in a settings class ``type`` is its field).
EngineClass = str | type


class EngineSettings(StrictModel):
    """What every engine config answers; the engines' configs below subclass it."""

    type: str
    # The engine's name: the value of its ``type`` literal, read from the class (never repeated).
    name: ClassVar[str] = ""
    # The Engine class that runs these settings: a class, or a ``module:Class`` string imported
    # only when a run builds it (a built-in engine's module imports Ray).
    engine: ClassVar[EngineClass] = ""
    # The pip extra the engine needs and a module that is importable only with it installed.
    extra: ClassVar[tuple[str, str] | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.name = literal_name(cls)

    def capabilities(self) -> frozenset[str]:
        """The primitives this engine offers with these settings (a new engine offers none until it
        declares them, so `validate` refuses every kind on it rather than guessing)."""
        return frozenset()

    def ranks(self, requested: int) -> int:
        """How many torch.distributed ranks `Engine.launch` starts; ``requested`` where the
        engine has no count of its own."""
        return 1

    def check(self, work_units: int, unit: str, source: str) -> None:
        """Refuse settings that cannot run ``work_units`` units of work (nodes, clients)."""

    def child_environment(self, env: dict[str, str]) -> dict[str, str]:
        """The environment of a child ``testbed`` process (a sweep variant) of this engine."""
        return env

    def preflight(self, source: str) -> None:
        """What can be checked before a run without starting anything (an address answers, ...)."""

    def refusal(self, kind: str, needed: frozenset[str]) -> str | None:
        """Why these settings cannot run a kind that needs one of ``needed`` (None: they can)."""
        if self.capabilities() & needed:
            return None
        return f"engine.type: '{self.type}' does not run kind '{kind}' (it needs {' or '.join(sorted(needed))})"


class LocalEngineConfig(EngineSettings):
    """Run on this machine. Ray is started in-process when the run has parallel work."""

    type: Literal["local"] = "local"
    engine: ClassVar[EngineClass] = "testbed.engines.ray_engine:LocalEngine"
    num_cpus: int | None = Field(None, gt=0, description="CPUs given to Ray; default: all")
    use_ray: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: start Ray only when the run has work to spread over processes"
    )
    dashboard: bool = Field(False, description="start Ray's dashboard to watch the run (off: saves seconds)")
    dashboard_host: str = Field(
        "127.0.0.1", min_length=1,
        description="interface the dashboard listens on; anything but loopback exposes it to the network")

    def capabilities(self) -> frozenset[str]:
        offered = {"tasks", "torch_distributed"}
        if self.use_ray != "never":
            offered |= {"actors", "ray"}
        return frozenset(offered)

    def refusal(self, kind: str, needed: frozenset[str]) -> str | None:
        if self.use_ray == "never" and not self.capabilities() & needed:
            return f"engine.use_ray: 'never' keeps Ray off, but kind '{kind}' runs on Ray; use auto"
        return super().refusal(kind, needed)

    def child_environment(self, env: dict[str, str]) -> dict[str, str]:
        # A local variant starts its own Ray, never joins the cluster $RAY_ADDRESS names.
        return {k: v for k, v in env.items() if k != "RAY_ADDRESS"}

    def preflight(self, source: str) -> None:
        import importlib.util

        if self.dashboard and importlib.util.find_spec("aiohttp_cors") is None:
            raise ScenarioError(f"{source}: engine.dashboard: Ray's dashboard needs its extra packages: "
                                "pip install 'ray[default]'")


class RayEngineConfig(EngineSettings):
    """Join an existing Ray cluster (``ray start --head`` or ``ray up``) by address."""

    type: Literal["ray"]
    engine: ClassVar[EngineClass] = "testbed.engines.ray_engine:RayClusterEngine"
    address: str = Field("auto", min_length=1, description="'auto', 'host:port' or 'ray://host:10001'")
    num_cpus_per_task: float = Field(1.0, gt=0)

    def capabilities(self) -> frozenset[str]:
        return frozenset({"tasks", "actors", "ray", "torch_distributed"})

    def ranks(self, requested: int) -> int:
        return requested

    def preflight(self, source: str) -> None:
        from testbed.cluster.addresses import check_ray_address

        check_ray_address(self.address, source)


class DeepSpeedEngineConfig(EngineSettings):
    """Run under the ``deepspeed`` launcher (N local processes, or a hostfile of nodes)."""

    type: Literal["deepspeed"]
    engine: ClassVar[EngineClass] = "testbed.engines.deepspeed_engine:DeepSpeedEngine"
    num_procs: int = Field(2, gt=0)
    hostfile: str | None = None
    extra: ClassVar[tuple[str, str] | None] = ("deepspeed", "deepspeed")

    def capabilities(self) -> frozenset[str]:
        return frozenset({"torch_distributed"})

    def ranks(self, requested: int) -> int:
        return self.num_procs

    def check(self, work_units: int, unit: str, source: str) -> None:
        from pathlib import Path

        if not self.hostfile:
            return
        try:
            exists = Path(self.hostfile).is_file()
        except OSError:  # a name the system refuses (too long)
            exists = False
        if not exists:
            raise ScenarioError(f"{source}: engine.hostfile: {shorten(self.hostfile)} does not exist")


class MpiEngineConfig(EngineSettings):
    """Run as ``mpiexec -n N`` ranks over mpi4py."""

    type: Literal["mpi"]
    engine: ClassVar[EngineClass] = "testbed.engines.mpi_engine:MpiEngine"
    num_procs: int = Field(2, gt=0)
    hosts: list[str] = Field(default_factory=list, description="host or host:N entries (mpiexec -hosts)")
    extra: ClassVar[tuple[str, str] | None] = ("mpi", "mpi4py")

    @field_validator("hosts")
    @classmethod
    def _hosts_are_host_names(cls, hosts: list[str]) -> list[str]:
        from testbed.cluster.hostfiles import validate_host_entry

        try:
            return [validate_host_entry(host) for host in hosts]
        except UserError as err:  # pydantic reports ValueErrors with the field's path
            raise ValueError(str(err)) from None

    def capabilities(self) -> frozenset[str]:
        return frozenset({"spmd"})

    def check(self, work_units: int, unit: str, source: str) -> None:
        if self.num_procs > work_units:
            raise ScenarioError(f"{source}: engine.num_procs: {self.num_procs} ranks for {work_units} {unit}; "
                                f"use at most one rank per {unit.rstrip('s')}")


@cache
def registered_engines() -> dict[str, type[EngineSettings]]:
    """Every engine by name: the built-in settings classes above, then ``testbed.engines`` plugins."""
    return declare("testbed.engines", (LocalEngineConfig, RayEngineConfig, DeepSpeedEngineConfig, MpiEngineConfig),
                   EngineSettings)


@cache
def engine_union() -> Any:
    """The type of a scenario's ``engine:`` block: one of the registered settings, chosen by ``type``."""
    return Annotated[Union[tuple(registered_engines().values())], Field(discriminator="type")]


if TYPE_CHECKING:
    EngineConfig = EngineSettings
else:
    def __getattr__(name: str) -> Any:
        # Built on first use, not on import: a plugin's module imports this one to subclass EngineSettings.
        if name == "EngineConfig":
            return engine_union()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
