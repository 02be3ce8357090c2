"""Local training of a copy of the global model: what every client does, and FLTrust's server on its
root set."""

from __future__ import annotations

import torch

from testbed.data.datasets import Dataset
from testbed.federated.setup import FederationSetup
from testbed.workloads.base import FederatedWorkload
from testbed.workloads.registry import workload_class


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
    model = setup.build_model()
    model.load_state_dict(global_state)
    loss = workload.fit_client(model, data, config, epochs, generator, proximal_mu)
    return model, loss
