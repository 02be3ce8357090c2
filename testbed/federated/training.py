"""Local training of a copy of the global model: what every client does, and FLTrust's server on its
root set, on the run's device (`testbed.device`; the model comes back to the CPU)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from testbed.data.datasets import Dataset
from testbed.workloads.base import FederatedWorkload
from testbed.workloads.registry import workload_class

if TYPE_CHECKING:
    from testbed.federated.setup import FederationSetup


def train_on(setup: FederationSetup, global_state: dict[str, torch.Tensor], data: Dataset, epochs: int,
             generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Train a copy of the global model on ``data``; return its new state."""
    assert setup.scenario.federated is not None  # a federated scenario
    model, _ = train_model(setup, global_state, data, epochs, generator, setup.scenario.federated.client_proximal_mu())
    return model.state_dict()


def train_model(setup: FederationSetup, global_state: dict[str, torch.Tensor], data: Dataset, epochs: int,
                generator: torch.Generator, proximal_mu: float) -> tuple[torch.nn.Module, float]:
    """A copy of the global model trained on ``data`` by the workload's client training, and its loss."""
    assert setup.scenario.workload is not None  # check_federated requires a federated workload
    workload = workload_class(setup.scenario.workload.name)
    assert issubclass(workload, FederatedWorkload)
    config = workload.Config.model_validate(setup.scenario.workload.params)
    model = copy.deepcopy(_initial_model(setup))
    model.load_state_dict(global_state)
    device = client_device(setup)
    if device.type == "cpu":  # where it was built: `Module.to` would visit every tensor to move none
        return model, workload.fit_client(model, data, config, epochs, generator, proximal_mu)
    loss = workload.fit_client(model.to(device), data, config, epochs, generator, proximal_mu)
    return model.to("cpu"), loss  # the upload, and the server's arithmetic, are on the CPU


def client_device(setup: FederationSetup) -> torch.device:
    """The device this process trains the scenario's clients on (its ``device:``, `testbed.device`)."""
    from testbed.device import run_device

    return torch.device(run_device(setup.scenario))


_initial_models: dict[int, tuple[FederationSetup, torch.nn.Module]] = {}


def _initial_model(setup: FederationSetup) -> torch.nn.Module:
    """The round-0 model of ``setup``, built once per process: a client copies it (0.3 ms) rather
    than building and seeding a new one (2.5 ms, most of a small client's training) for each of
    its messages. A copy of the pristine model carries nothing from one client to the next."""
    key = id(setup)
    if key not in _initial_models or _initial_models[key][0] is not setup:
        if len(_initial_models) >= 4:  # as many as `federation_setup` caches
            _initial_models.pop(next(iter(_initial_models)))
        _initial_models[key] = (setup, setup.build_model())
    return _initial_models[key][1]
