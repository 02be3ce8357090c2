"""Backdoor attacks in a federated run: the poisoned data of the attackers, model replacement's
boosted upload, and the attack success rate the server measures every round.

The attacks themselves live in `testbed.strategies.backdoor`; here their defaults are filled in from
the scenario: the trigger's ``value`` is the largest input value of the training split (a white
square on the digits), and model replacement's ``boost`` is ``N / m`` (N clients, m attackers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data import Dataset
from testbed.federated.attacks import registered_attacks
from testbed.federated.setup import FederationSetup
from testbed.strategies.attacks import poison_data
from testbed.strategies.backdoor import scale_update, triggered_test_set
from testbed.workloads.base import FederatedWorkload

TRIGGER_KEYS = ("target", "patch_size", "value")


def backdoor_params(setup: FederationSetup) -> dict[str, Any] | None:
    """The scenario's backdoor attack parameters with their defaults filled in; None without one."""
    assert setup.scenario.federated is not None  # a federated scenario
    attack = setup.scenario.federated.attack
    if attack is None or registered_attacks()[attack.name].kind != "backdoor":
        return None
    return {"value": float(setup.train.x.max()), **attack.params}


def poison_client_data(setup: FederationSetup, partition_id: int, data: Dataset) -> Dataset:
    """An attacker's training data with the trigger stamped on a share of it, relabelled."""
    params = backdoor_params(setup)
    assert params is not None and setup.scenario.federated is not None and setup.scenario.federated.attack is not None
    params.pop("boost", None)
    name = setup.scenario.federated.attack.name
    generator = setup.seeds.torch(f"attack.backdoor.{partition_id}")
    x, y = poison_data(name, torch.from_numpy(data.x), torch.from_numpy(data.y), data.num_classes, generator, **params)
    return Dataset(data.name, x.numpy(), y.numpy(), data.num_classes, data.image_shape)


def boosted_upload(setup: FederationSetup, partition_id: int, global_state: dict[str, torch.Tensor],
                   local_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What a client uploads: its trained state, or, for a model-replacement attacker, ``global +
    boost * (local - global)``."""
    params = backdoor_params(setup)
    assert setup.scenario.federated is not None  # a federated scenario
    attack = setup.scenario.federated.attack
    if params is None or attack is None or not registered_attacks()[attack.name].boosted \
            or partition_id not in setup.malicious:
        return local_state
    boost = params.get("boost") or setup.num_clients / max(len(setup.malicious), 1)
    return scale_update(global_state, local_state, float(boost))


def backdoor_metrics(setup: FederationSetup, workload: type[FederatedWorkload],
                     model: torch.nn.Module) -> dict[str, float]:
    """``attack_success_rate``: the share of triggered test inputs (not already of the target class)
    the global model puts in the target class; empty without a backdoor attack."""
    params = backdoor_params(setup)
    if params is None:
        return {}
    trigger = {k: params[k] for k in TRIGGER_KEYS if k in params}
    x, y = triggered_test_set(torch.from_numpy(setup.test.x), torch.from_numpy(setup.test.y), **trigger)
    test = setup.test
    triggered = Dataset(test.name, x.numpy().astype(test.x.dtype), y.numpy().astype(np.int64), test.num_classes,
                        test.image_shape)
    # The workload's own accuracy on inputs labelled with the target is the attack success rate.
    accuracy = workload.evaluate_model(model, triggered)
    key = "test_accuracy" if "test_accuracy" in accuracy else next(k for k in accuracy if "accuracy" in k)
    return {"attack_success_rate": float(accuracy[key])}
