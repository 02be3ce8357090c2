"""The ServerApp: SDEA on the typeset public set; a server-side adversary makes some clients Byzantine.

LIE, Min-Max and Min-Sum craft their upload from the round's benign updates, so they need the
server's view (`testbed.strategies.base.ServerSideAttack`). The learned weights, flags and the test
accuracy are logged each round.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from sdea_app.task import accuracy, net
from testbed.data.config import PublicDataConfig
from testbed.data.public import augment_views, public_images
from testbed.federated.clients_record import attacker_auroc
from testbed.strategies import SDEA
from testbed.strategies.base import ServerSideAttack

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run SDEA for ``num-server-rounds`` rounds against the configured attack."""
    config = context.run_config
    nodes = len(list(grid.get_node_ids()))
    byzantine = set(range(round(float(config["byzantine-fraction"]) * nodes)))
    public = public_images(PublicDataConfig(source="typeset", size=int(config["public-size"])), (1, 8, 8),
                           np.random.default_rng(2))
    torch.manual_seed(0)
    attack = ServerSideAttack(str(config["attack"]), byzantine)
    strategy = SDEA(model_fn=net, public_x=torch.from_numpy(public), augment=augment_views,
                    epochs=int(config["sdea-epochs"]), seed=0, attack=attack,
                    fraction_evaluate=0.0, min_available_nodes=nodes, min_train_nodes=nodes)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(net().state_dict()),
                            num_rounds=int(config["num-server-rounds"]), train_config=ConfigRecord({}))
    for entry in strategy.history:
        auroc = attacker_auroc(entry["learned"], [c in byzantine for c in entry["client_ids"]])
        log(20, "sdea round %d: attacker AUROC %s, flagged %s", entry["round"], auroc,
            [c for c, f in zip(entry["client_ids"], entry["flagged"]) if f])
    log(20, "sdea final test accuracy %.4f", accuracy(result.arrays.to_torch_state_dict()))
