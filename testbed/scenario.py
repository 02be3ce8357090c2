"""The typed scenario schema: what a YAML scenario file may contain.

Every model rejects unknown keys and is frozen once validated. Each scenario kind owns the model of
its own section (``federated:`` lives in `testbed.federated.config`). Sections that name a plugin (the
workload, later strategies and attacks) keep their plugin-specific keys as extras here; the
loader validates those against the plugin's own config model (see `testbed.loading`), so a typo
inside a plugin's block is reported with its full path just like any other key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationInfo, field_validator

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
    dashboard: bool = Field(False, description="start Ray's dashboard to watch the run (off: saves seconds)")
    dashboard_host: str = Field(
        "127.0.0.1", min_length=1,
        description="interface the dashboard listens on; anything but loopback exposes it to the network")


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


class OodConfig(StrictModel):
    """OODRobustBench's evaluation of a final model (``testbed.workloads.oodrobust.evaluate_ood``).

    Robust accuracy in distribution under the seen threat (an L-inf PGD + MM-k ensemble), under
    dataset shifts (corruptions at severities, typeset digits) and under unseen threats. Defined
    here, not in the workload package, because the report block of the scenario needs it and the
    workloads import this module.
    """

    epsilon: float = Field(0.1, gt=0, le=1, description="seen threat: L-inf budget on [0, 1] pixels")
    attack_steps: int = Field(20, gt=0)
    restarts: int = Field(2, gt=0, description="PGD-CE starts (the first from the clean input)")
    margin_classes: int = Field(3, ge=0, description="MM-k: targeted margin attacks on the top-k wrong classes")
    id_attack: Literal["ensemble", "pgd"] = Field("ensemble", description="pgd: one PGD-CE run (weaker)")
    corruptions: list[Literal["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur", "contrast",
                              "brightness", "translate", "elastic"]] = Field(
        default_factory=lambda: ["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur", "contrast",
                                 "brightness", "translate", "elastic"])
    severities: list[Annotated[int, Field(ge=1, le=5)]] = Field(default_factory=lambda: [2, 4], min_length=1)
    natural: bool = Field(True, description="the typeset-digits shift (8x8 digits only)")
    threats: list[Literal["linf_large", "l2", "rotation", "patch"]] = Field(
        default_factory=lambda: ["linf_large", "l2", "rotation", "patch"])
    linf_large_scale: float = Field(1.5, gt=1, description="linf_large budget = scale * epsilon")
    l2_epsilon: float = Field(0.5, gt=0)
    rotation_degrees: float = Field(15.0, gt=0, le=180)
    patch_size: int = Field(1, gt=0, description="side of the adversarial square patch, pixels")
    eval_size: int = Field(300, gt=0, description="test samples evaluated (the first ones of the split)")


class ReportConfig(StrictModel):
    """What the run's report shows and which experiment trackers receive its metrics."""

    kind: Literal["training", "robustness", "privacy", "pretraining"] = "training"
    trackers: list[Literal["tensorboard", "mlflow"]] = Field(default_factory=list)
    ood: OodConfig | None = Field(None, description="federated: evaluate the final global model out of distribution")


class SweepConfig(StrictModel):
    """Many variants of one scenario, run in parallel, each in its own sub-run folder.

    ``grid`` maps dotted keys to lists of values (their product is taken); ``variants`` lists
    override mappings; with both, every variant is combined with every grid point.
    """

    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    parallel: int | None = Field(None, gt=0, description="variants at once; default: CPUs / 2")
    metrics: list[str] = Field(default_factory=list, description=(
        "final metrics the comparison report tabulates and plots; default: test accuracy and loss "
        "where the runs report them, otherwise every numeric final metric the variants share"))


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

    @field_validator("report")
    @classmethod
    def _ood_only_in_federated_robustness_reports(cls, value: ReportConfig, info: ValidationInfo) -> ReportConfig:
        # The OOD evaluation runs on a federated run's final global model and renders in the robustness
        # report; elsewhere it would be silently ignored (the oodrobust workload has its own block).
        if value.ood is not None and (info.data.get("kind") != "federated" or value.kind != "robustness"):
            raise ValueError("ood: set only in kind: federated scenarios with report kind: robustness")
        return value

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_defaults_to_local(cls, value: Any) -> Any:
        # `engine: {num_cpus: 2}` is the common case; make `type: local` implicit.
        if isinstance(value, dict) and "type" not in value:
            return {"type": "local", **value}
        return value
