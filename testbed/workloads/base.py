"""The workload interface; `testbed.workloads.registry` lists the workloads.

A workload is the unit a scenario trains: it builds itself from its own typed config, the data
config and a `SeedTree`, trains for N steps, evaluates with its own metrics, and saves and
restores its whole state (model, optimizer, RNG, data cursor) so a run can resume exactly.
Federated and decentralized runners reuse its model and training functions on client data.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from testbed.config import StrictModel
from testbed.data.config import DataConfig
from testbed.seeding import SeedTree

if TYPE_CHECKING:
    from testbed.report.sections import ReportSection
    from testbed.workloads.audits import Audit

def snapshot(value: Any) -> Any:
    """A checkpointable copy of one piece of workload state, its tensors on the CPU (a checkpoint
    loads on any machine, and a state crosses processes without a device)."""
    if isinstance(value, torch.Generator):
        return value.get_state()
    if isinstance(value, np.random.Generator):
        return value.bit_generator.state
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    return on_cpu(value.state_dict()) if hasattr(value, "state_dict") else value


def on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it (in nested dicts, lists and tuples) on the CPU; a CPU
    tensor is kept as it is, so a CPU run's state is the same objects."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        moved = copy.copy(value)  # keeps the mapping's type and a module state's ``_metadata``
        for key, item in value.items():
            moved[key] = on_cpu(item)
        return moved
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(item) for item in value) if type(value) in (list, tuple) else value
    return value


def restored(current: Any, saved: Any) -> Any:
    """``current`` with ``saved`` put back: stateful objects in place (a trained tensor keeps its
    identity, so the optimizer still holds it), other values replaced."""
    if isinstance(current, torch.Generator):
        current.set_state(saved)
    elif isinstance(current, np.random.Generator):
        current.bit_generator.state = saved
    elif isinstance(current, torch.Tensor) and current.requires_grad:
        with torch.no_grad():
            current.copy_(saved)
    elif isinstance(current, torch.Tensor):
        return saved.to(current.device, copy=True)
    elif hasattr(current, "load_state_dict"):
        current.load_state_dict(saved)
    else:
        return saved
    return current


class Workload(ABC):
    """Base class of every scenario workload."""

    name: ClassVar[str]
    Config: ClassVar[type[StrictModel]]
    summary: ClassVar[str] = ""
    # The metric that says how good a run is, and whether higher is better.
    headline_metric: ClassVar[tuple[str, str]] = ("loss", "min")
    # Report sections of this workload; they read the run folder's artifacts.npz (see `artifacts`).
    report_sections: ClassVar[list[ReportSection]] = []
    # Audits of a final model this workload offers to every kind, by the ``report:`` key that switches
    # each on (see `testbed.workloads.audits`). A built-in workload declares them in its config module
    # (``AUDITS``) instead, which the registry reads without the model code; its class takes them.
    audits: ClassVar[dict[str, type[Audit]]] = {}
    # Attributes a checkpoint holds (modules, optimizers, data streams, RNGs, tensors, plain values),
    # saved and restored by the default `state_dict` / `load_state_dict`; a workload whose state does
    # not fit this overrides both.
    checkpointed: ClassVar[tuple[str, ...]] = ()
    # Whether train and evaluate run on a CUDA device given by `to_device` (models and batches moved
    # there); ``device: cuda`` is refused for a workload that does not declare it (`testbed.device`).
    supports_cuda: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A built-in workload's class (in ``testbed.workloads.<name>.workload``) is what its torch-free
        config module declares, which the registry reads without importing the class (one declaration):
        it takes the audits from ``AUDITS``, and it fails at import unless it is a `FederatedWorkload`
        exactly when ``KINDS`` holds ``federated``."""
        super().__init_subclass__(**kwargs)
        name = str(getattr(cls, "name", ""))
        if cls.__module__ != f"testbed.workloads.{name}.workload":
            return  # a plugin's class, or a test's: it declares its own
        # Read as `testbed.workloads.registry` reads them (by module name: the registry imports this
        # module, so this one cannot import the registry).
        config = importlib.import_module(f"testbed.workloads.{name}.config")
        where = f"{cls.__module__}.{cls.__qualname__}"
        if "audits" in vars(cls):
            raise TypeError(f"{where}: a built-in workload declares its audits in {config.__name__} (AUDITS), "
                            "not on its class")
        cls.audits = {key: pkgutil.resolve_name(reference) for key, reference in getattr(config, "AUDITS", {}).items()}
        kinds = tuple(getattr(config, "KINDS", ("workload",)))
        if ("federated" in kinds) != issubclass(cls, FederatedWorkload):
            raise TypeError(f"{where}: {config.__name__} declares KINDS = {kinds}; a workload runs under kind: "
                            "federated exactly when its class is a FederatedWorkload")

    def __init__(self, config: StrictModel, data: DataConfig, seeds: SeedTree):
        self.config = config
        self.data_config = data
        self.seeds = seeds
        self.device = torch.device("cpu")

    def to_device(self, device: torch.device) -> None:
        """Train and evaluate on ``device`` from now on: moves the ``checkpointed`` modules there.

        Called on a fresh workload, before a checkpoint is loaded (an optimizer's loaded state then
        follows its parameters). A workload that keeps other tensors on the device overrides this.
        """
        self.device = device
        for name in self.checkpointed:
            value = getattr(self, name)
            if isinstance(value, torch.nn.Module):
                value.to(device)

    @staticmethod  # noqa: B027  (plugin workloads may have no checks)
    def check(config: Any, data: DataConfig) -> None:
        """Reject config/data combinations that cannot work: raise `ScenarioError("workload.<field>: ...")`;
        the loader prefixes the scenario file. Built-in workloads set ``check = staticmethod(config.check)``
        from their torch-free config module, which the registry calls without importing the class."""

    @abstractmethod
    def train(self, steps: int) -> dict[str, float]:
        """Train for ``steps`` optimisation steps; return training metrics averaged over them."""

    @abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Evaluate on held-out data with the workload's own metrics."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training bit-for-bit: by default the ``checkpointed`` attributes."""
        if not self.checkpointed:
            raise NotImplementedError(f"{type(self).__name__}: name its state in `checkpointed` or override state_dict")
        return {name: snapshot(getattr(self, name)) for name in self.checkpointed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state returned by `state_dict`."""
        if not self.checkpointed:
            raise NotImplementedError(f"{type(self).__name__}: name its state in `checkpointed` or override "
                                      "load_state_dict")
        for name in self.checkpointed:
            setattr(self, name, restored(getattr(self, name), state[name]))

    def artifacts(self) -> dict[str, np.ndarray]:
        """Arrays the report plots (samples, trajectories, fields), saved once at the end of a run."""
        return {}

    @abstractmethod
    def build_model(self) -> torch.nn.Module:
        """A freshly initialised model, for runners that train it elsewhere (e.g. FL clients)."""


class FederatedWorkload(Workload):
    """A workload whose model federated clients can train (``kind: federated`` needs one)."""

    @classmethod
    @abstractmethod
    def model_for(cls, config: StrictModel, data: Any) -> torch.nn.Module:
        """A model for ``data`` (a `testbed.data.Dataset`), initialised from torch's global RNG."""

    @classmethod
    @abstractmethod
    def fit_client(cls, model: torch.nn.Module, data: Any, config: StrictModel, epochs: int,
                   generator: torch.Generator, proximal_mu: float = 0.0) -> float:
        """Train ``model`` in place for ``epochs`` on a client's data; return the mean loss.

        ``proximal_mu`` adds FedProx's term (mu / 2) * ||w - w_start||^2 to the local objective.
        """

    @classmethod
    @abstractmethod
    def evaluate_model(cls, model: torch.nn.Module, data: Any) -> dict[str, float]:
        """The workload's metrics of ``model`` on ``data`` (e.g. test accuracy and loss)."""
