"""End to end: a plain Flower 1.42 app (``flwr.simulation.run_simulation``, no testbed CLI) makes two of
its six clients Byzantine with one client mod (`testbed.strategies.byzantine_mod`) and defends with
SDEA. The setup is that of tests/strategies/test_flower_sdea_e2e.py (digits, small CNN, typeset public
set), smaller: IID shards, 2 rounds. The attackers' mod replaces what they trained by the untrained
network they first received (SDEA's "RanN"); SDEA's learned weights must rank them below the honest
clients and FINCH must flag them, which only holds if the mod really rewrote their replies (measured:
learned weights 0.126 for both attackers against 0.187 for every honest client, both rounds). (With
``sign_flip`` at scale 3 instead, SDEA weighs the flipped models *up*, 0.215 against 0.142: their
confident predictions score a low entropy.)
"""

import sys

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from ray import cloudpickle

from testbed.data.config import PublicDataConfig
from testbed.data.public import augment_views, public_images
from testbed.federated.clients_record import attacker_auroc
from testbed.strategies import SDEA, byzantine_mod
from tests.strategies import test_flower_sdea_e2e as sdea_app
from tests.strategies.test_flower_sdea_e2e import TEST, _digits, _net, train_reply

NUM_CLIENTS, NUM_ROUNDS, MALICIOUS = 6, 2, {1, 4}

# The one line that makes clients 1 and 4 Byzantine: they upload an untrained network every round.
client_app = ClientApp(mods=[byzantine_mod("random_noise", partition_ids=MALICIOUS)])


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    rows = np.array_split(np.random.default_rng(1).permutation(len(_digits()[1]) - TEST), NUM_CLIENTS)[pid]
    return train_reply(msg, pid, torch.from_numpy(rows) + TEST, epochs=2)


@pytest.mark.integration
def test_an_attack_mod_and_sdea_in_a_plain_flower_app():
    # Prepare: ship this module and the one it borrows from to the Ray actors by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(sdea_app)
    out: dict = {}
    public = torch.from_numpy(public_images(PublicDataConfig(source="typeset", size=256), (1, 8, 8),
                                            np.random.default_rng(2)))
    torch.manual_seed(0)
    initial = ArrayRecord(_net().state_dict())
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = SDEA(model_fn=_net, public_x=public, augment=augment_views, epochs=10, seed=0,
                        fraction_evaluate=0.0, min_available_nodes=NUM_CLIENTS, min_train_nodes=NUM_CLIENTS)
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=NUM_ROUNDS, timeout=300,
                       train_config=ConfigRecord({}))
        out["history"] = strategy.history

    # Execute
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=NUM_CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": 1, "address": "local"}})

    # Assert: every round, the mod's attackers get the lowest learned weights and are flagged.
    assert [h["round"] for h in out["history"]] == list(range(1, NUM_ROUNDS + 1))
    for entry in out["history"]:
        assert entry["client_ids"] == list(range(NUM_CLIENTS))
        byzantine = [c in MALICIOUS for c in entry["client_ids"]]
        auroc = attacker_auroc(entry["learned"], byzantine)
        assert auroc is not None and auroc >= 0.9, (auroc, entry["learned"])
        assert MALICIOUS <= {c for c, f in zip(entry["client_ids"], entry["flagged"]) if f}
