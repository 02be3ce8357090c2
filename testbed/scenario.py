"""The typed scenario schema: what a YAML scenario file may contain.

Every model rejects unknown keys and is frozen once validated. Each scenario kind owns the model of
its own section (``federated:`` lives in `testbed.federated.config`). Sections that name a plugin (the
workload, later strategies and attacks) keep their plugin-specific keys as extras here; the
loader validates those against the plugin's own config model (see `testbed.loading`), so a typo
inside a plugin's block is reported with its full path just like any other key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from testbed.config import PluginSpec, StrictModel
from testbed.data.partition import IidPartition, PartitionConfig
from testbed.decentralized.config import DecentralizedConfig
from testbed.pretrain.config import PretrainConfig
from testbed.federated.config import FederatedConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class LocalEngineConfig(StrictModel):
    """Run on this machine. Ray is started in-process when the run has parallel work."""

    type: Literal["local"] = "local"
    num_cpus: int | None = Field(None, gt=0, description="CPUs given to Ray; default: all")
    use_ray: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: start Ray only when the run has work to spread over processes"
    )


class RayEngineConfig(StrictModel):
    """Join an existing Ray cluster (``ray start --head`` or ``ray up``) by address."""

    type: Literal["ray"]
    address: str = Field("auto", min_length=1, description="'auto', 'host:port' or 'ray://host:10001'")
    num_cpus_per_task: float = Field(1.0, gt=0)


class DeepSpeedEngineConfig(StrictModel):
    """Run under the ``deepspeed`` launcher (N local processes, or a hostfile of nodes)."""

    type: Literal["deepspeed"]
    num_procs: int = Field(2, gt=0)
    hostfile: str | None = None


class MpiEngineConfig(StrictModel):
    """Run as ``mpiexec -n N`` ranks over mpi4py."""

    type: Literal["mpi"]
    num_procs: int = Field(2, gt=0)
    hosts: list[str] = Field(default_factory=list)


EngineConfig = Annotated[
    Union[LocalEngineConfig, RayEngineConfig, DeepSpeedEngineConfig, MpiEngineConfig],
    Field(discriminator="type"),
]


class DataConfig(StrictModel):
    """Which dataset a run uses, how it is split into train and test, and over how many clients."""

    dataset: str = "digits"
    path: str | None = Field(None, description="folder of a file dataset (cifar10, fashion_mnist, femnist)")
    test_fraction: float = Field(0.25, gt=0, lt=1)
    num_clients: int = Field(1, gt=0, description="clients (federated) or nodes (decentralized)")
    partition: PartitionConfig = Field(default_factory=IidPartition)
    replicate: int = Field(1, gt=0, description="repeat the training split k times before partitioning, "
                                                 "so scale tests can have more clients than samples")


class TrainingConfig(StrictModel):
    """The loop of a centrally trained workload (``kind: workload``)."""

    steps: int = Field(200, gt=0)
    eval_every: int = Field(20, gt=0)
    checkpoint_every: int = Field(50, gt=0)


class ReportConfig(StrictModel):
    """What the run's report shows and which experiment trackers receive its metrics."""

    kind: Literal["training", "robustness", "privacy", "pretraining"] = "training"
    trackers: list[Literal["tensorboard", "mlflow"]] = Field(default_factory=list)


class SweepConfig(StrictModel):
    """Many variants of one scenario, run in parallel, each in its own sub-run folder.

    ``grid`` maps dotted keys to lists of values (their product is taken); ``variants`` lists
    override mappings; with both, every variant is combined with every grid point.
    """

    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    parallel: int | None = Field(None, gt=0, description="variants at once; default: CPUs / 2")


class Scenario(StrictModel):
    """A whole scenario file: one run of one kind, with one root seed."""

    name: str = Field(pattern=NAME_PATTERN)
    kind: Literal["workload", "federated", "decentralized", "pretrain"]
    description: str = ""
    seed: int = Field(0, ge=0)
    engine: EngineConfig = Field(default_factory=LocalEngineConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    workload: PluginSpec | None = None
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    pretrain: PretrainConfig | None = None
    report: ReportConfig = Field(default_factory=ReportConfig)
    federated: FederatedConfig | None = None
    decentralized: DecentralizedConfig | None = None
    sweep: SweepConfig | None = None

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_defaults_to_local(cls, value: Any) -> Any:
        # `engine: {num_cpus: 2}` is the common case; make `type: local` implicit.
        if isinstance(value, dict) and "type" not in value:
            return {"type": "local", **value}
        return value
