"""The typed scenario schema: what a YAML scenario file may contain.

Every model rejects unknown keys and is frozen once validated. Each block is owned by the package
it configures (``engine:`` by `testbed.engines.config`, ``data:`` by `testbed.data.config`,
``federated:`` by `testbed.federated.config`, ...); this module only assembles them, and imports
nothing heavier than pydantic. Sections that name a plugin (the
workload, later strategies and attacks) keep their plugin-specific keys as extras here; the
loader validates those against the plugin's own config model (see `testbed.loading`), so a typo
inside a plugin's block is reported with its full path just like any other key.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from testbed.claims.config import ClaimsConfig
from testbed.config import PluginSpec, StrictModel
from testbed.data.config import DataConfig
from testbed.decentralized.config import DecentralizedConfig
from testbed.engines.config import EngineConfig, LocalEngineConfig
from testbed.federated.config import FederatedConfig
from testbed.pretrain.config import PretrainConfig
from testbed.workloads.config import TrainingConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# The default run folder is runs/<name>-<timestamp>, and file names end at 255 bytes.
MAX_NAME_LENGTH = 128

# The blocks each kind reads, besides name, kind, description and seed (a scenario with another
# block was most likely meant for another kind: `--set kind=pretrain` on a workload file), and
# those it cannot run without.
KIND_BLOCKS: dict[str, tuple[str, ...]] = {
    "workload": ("engine", "data", "workload", "training", "report", "sweep", "claims"),
    "federated": ("engine", "data", "workload", "federated", "report", "sweep", "claims"),
    "decentralized": ("engine", "data", "decentralized", "report", "sweep", "claims"),
    "pretrain": ("engine", "data", "pretrain", "report", "sweep", "claims"),
}
# The ``device:`` values (`testbed.device` resolves ``auto`` and refuses what this machine lacks).
DEVICES = "auto (CUDA when present and the scenario's code supports it, else the CPU), cpu, cuda or cuda:N"
DEVICE_PATTERN = r"auto|cpu|cuda(:[0-9]+)?"
KIND_REQUIRES: dict[str, tuple[str, ...]] = {
    "workload": ("workload",), "federated": ("workload",), "decentralized": ("decentralized",),
    "pretrain": ("pretrain",),
}


class ReportConfig(StrictModel):
    """What the run's report shows and which experiment trackers receive its metrics."""

    kind: Literal["training", "robustness", "privacy", "pretraining"] = "training"
    trackers: list[str] = Field(default_factory=list, description=(
        "experiment trackers to switch on with their defaults: tensorboard, mlflow, wandb or a plugin's"))
    tracking: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "a tracker's own settings, which also switch it on, e.g. mlflow: {tracking_uri: ..., experiment: ...}"))

    # An audit a workload offers is switched on by a key of its name (``ood: {...}``): held here as an
    # extra key and validated by the loader against the config of the audit some registered workload
    # offers under that name (`testbed.workloads.audits`), which then takes its place. The schema names
    # no audit, so a workload (a plugin's too) adds one without a field here.
    model_config = ConfigDict(**{**StrictModel.model_config, "extra": "allow"})

    def audit_blocks(self) -> dict[str, Any]:
        """The audits this report switches on: their blocks, by audit name."""
        return {name: block for name, block in (self.model_extra or {}).items() if block is not None}


class SweepConfig(StrictModel):
    """Many variants of one scenario, run in parallel, each in its own sub-run folder.

    ``grid`` maps dotted keys to lists of values (their product is taken); ``variants`` lists
    override mappings; with both, every variant is combined with every grid point.
    """

    grid: dict[str, list[Any]] = Field(default_factory=dict)
    variants: list[dict[str, Any]] = Field(default_factory=list)
    parallel: int | None = Field(None, gt=0, description="variants at once; default: CPUs / 2")
    processes: Literal["warm", "fresh", "shared"] = Field("warm", description=(
        "warm: each variant's process is forked from one that imported torch and the rest once; "
        "fresh: a new interpreter per variant, paying those imports each time; shared: each of the "
        "parallel slots is one warm process that runs its variants one after another on one Ray "
        "with the same client actors (local engine; many small federated variants)"))
    metrics: list[str] = Field(default_factory=list, description=(
        "final metrics the comparison report tabulates and plots; default: test accuracy and loss "
        "where the runs report them, otherwise every numeric final metric the variants share"))


class Scenario(StrictModel):
    """A whole scenario file: one run of one kind, with one root seed."""

    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME_LENGTH)
    kind: Literal["workload", "federated", "decentralized", "pretrain"]
    description: str = ""
    seed: int = Field(0, ge=0)
    # Top level, not in engine:, because it is where the tensors live, whichever engine places the
    # work (every engine type would repeat it), and `--set device=cpu` stays short.
    device: str = Field("auto", description=f"where training runs: {DEVICES}; resolved and checked by testbed.device")
    engine: EngineConfig = Field(default_factory=LocalEngineConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    workload: PluginSpec | None = None
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    pretrain: PretrainConfig | None = None
    report: ReportConfig = Field(default_factory=ReportConfig)
    federated: FederatedConfig | None = None
    decentralized: DecentralizedConfig | None = None
    sweep: SweepConfig | None = None
    claims: ClaimsConfig | None = None

    @field_validator("claims")
    @classmethod
    def _claims_need_a_sweep(cls, value: ClaimsConfig | None, info: ValidationInfo) -> ClaimsConfig | None:
        # A claim is called on per-seed metrics of several arms: only a sweep has them.
        if value is not None and info.data.get("sweep") is None:
            raise ValueError("claims: a claims block needs a sweep: block (its arms are the sweep's variants)")
        return value

    @field_validator("device")
    @classmethod
    def _device_is_known(cls, value: str) -> str:
        if not re.fullmatch(DEVICE_PATTERN, value):
            raise ValueError(f"not a device; use {DEVICES}")
        return value

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_defaults_to_local(cls, value: Any) -> Any:
        # `engine: {num_cpus: 2}` is the common case; make `type: local` implicit.
        if isinstance(value, dict) and "type" not in value:
            return {"type": "local", **value}
        return value
