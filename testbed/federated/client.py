"""The Flower client app: each virtual client trains the workload's model on its own partition.

A client's randomness comes from the root seed, its partition id and the round, never from the
process it runs in, so every engine computes the same replies. Byzantine clients of a data attack
(label flipping) train on poisoned labels, those of a backdoor attack on triggered inputs
(`testbed.federated.backdoor`); model attacks are applied by the server loop, which
plays the omniscient adversary (see `testbed.federated.server`).
"""

from __future__ import annotations

import json
import time
from functools import lru_cache

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from testbed.data import Dataset
from testbed.determinism import single_threaded
from testbed.federated.arrays import record_of, state_of
from testbed.federated.attacks import registered_attacks
from testbed.federated.backdoor import boosted_upload, poison_client_data
from testbed.federated.dp import client_mods
from testbed.federated.setup import FederationSetup, federation_setup
from testbed.federated.training import train_model
from testbed.scenario import Scenario
from testbed.strategies import poison_labels

PARTITION_KEY = "partition-id"  # the reply metric the server orders replies by


@lru_cache(maxsize=4)
def setup_of(scenario_json: str, held_back: int) -> FederationSetup:
    """The federation's setup from the scenario text (and the samples its strategy holds back for the
    server) the client app carries: validated once per process, not once per message (at 10^5
    clients a round is 10^5 messages)."""
    return federation_setup(Scenario.model_validate(json.loads(scenario_json)), held_back)


@lru_cache(maxsize=256)
def poisoned_client_data(scenario_json: str, held_back: int, partition_id: int) -> Dataset:
    """A client's data, with its labels flipped once and for all if it is a data-poisoning attacker."""
    setup = setup_of(scenario_json, held_back)
    data = setup.client_data(partition_id)
    assert setup.scenario.federated is not None  # a federated scenario
    attack = setup.scenario.federated.attack
    if attack is not None and partition_id in setup.malicious and registered_attacks()[attack.name].kind == "backdoor":
        return poison_client_data(setup, partition_id, data)
    if attack is None or partition_id not in setup.malicious or registered_attacks()[attack.name].kind != "data":
        return data
    generator = setup.seeds.torch(f"attack.labels.{partition_id}")
    labels = poison_labels(attack.name, torch.from_numpy(data.y), data.num_classes, generator, **attack.params)
    return Dataset(data.name, data.x, labels.numpy(), data.num_classes, data.image_shape)


def client_train(scenario_json: str, held_back: int, msg: Message, context: Context) -> Message:
    """Handle one training message: local epochs from the received global model."""
    partition_id = int(context.node_config[PARTITION_KEY])
    setup = setup_of(scenario_json, held_back)
    server_round = int(msg.content["config"]["server-round"])  # type: ignore[arg-type]  # flwr: values of any record
    inject_fault(setup, partition_id, server_round)
    data = poisoned_client_data(scenario_json, held_back, partition_id)
    generator = setup.seeds.child(f"client.{partition_id}").torch(f"round.{server_round}")
    assert setup.scenario.federated is not None  # a federated scenario
    federated = setup.scenario.federated
    with single_threaded():
        global_state = state_of(msg.content["arrays"])  # type: ignore[arg-type]  # flwr: values of any record
        model, loss = train_model(setup, global_state, data, federated.local_epochs, generator,
                                  federated.client_proximal_mu())
    metrics = MetricRecord({"num-examples": len(data.y), "train_loss": loss, PARTITION_KEY: partition_id})
    upload = boosted_upload(setup, partition_id, global_state, model.state_dict())  # model replacement's boost
    return Message(RecordDict({"arrays": record_of(upload), "metrics": metrics}), reply_to=msg)


class InjectedClientFault(RuntimeError):
    """Raised by a client chosen by ``federated.faults`` (kind: raise)."""


def inject_fault(setup: FederationSetup, partition_id: int, server_round: int) -> None:
    """Make this client fail as ``federated.faults`` asks, from its ``from_round`` on."""
    assert setup.scenario.federated is not None  # a federated scenario
    faults = setup.scenario.federated.faults
    if faults is None or partition_id not in setup.faulty or server_round < faults.from_round:
        return
    if faults.kind == "hang":
        time.sleep(faults.hang_s)
        return
    raise InjectedClientFault(f"client {partition_id} fails in round {server_round} (federated.faults)")


def make_client_app(scenario: Scenario) -> ClientApp:
    """A ClientApp for the scenario; it carries only the scenario text (data loads in each worker)
    and the samples the strategy holds back for the server, read here from its declaration (a worker
    may not have a plugin strategy installed)."""
    from testbed.federated.strategies import server_samples

    scenario_json = json.dumps(scenario.model_dump(mode="json"), sort_keys=True)
    assert scenario.federated is not None  # a federated scenario
    held_back = server_samples(scenario.federated.strategy)
    app = ClientApp()

    @app.train(mods=client_mods(scenario))  # Flower's DP mods when federated.privacy asks for them
    def train(msg: Message, context: Context) -> Message:
        return client_train(scenario_json, held_back, msg, context)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Say which partition this node holds (client sampling addresses partitions: `testbed.federated.sampling`)."""
        partition = MetricRecord({PARTITION_KEY: int(context.node_config[PARTITION_KEY])})
        return Message(RecordDict({"metrics": partition}), reply_to=msg)

    return app
