"""End to end: SDEA inside a plain Flower 1.42 app run with ``flwr.simulation.run_simulation``.

Six clients train a tiny MLP with BatchNorm on scikit-learn's digits; the
last two (partition ids 4 and 5) upload sign-flipped updates. SDEA, given an
unlabelled public slice of digits no client holds, must flag exactly those two
in every round and still produce a model that classifies well.
"""

import sys

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from ray import cloudpickle

from testbed.strategies import SDEA

NUM_CLIENTS, NUM_ROUNDS, MALICIOUS = 6, 2, {4, 5}
PUBLIC, TEST = 200, 300  # first rows public, next rows test, the rest split among clients


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 10)
    )


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(x))
    return torch.tensor(x[perm] / 16.0, dtype=torch.float32), torch.tensor(y[perm])


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return x + 0.05 * torch.randn(x.shape, generator=gen)


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    pid = int(context.node_config["partition-id"])
    x, y = _digits()
    shard = torch.arange(PUBLIC + TEST, len(x)).chunk(NUM_CLIENTS)[pid]
    arrays = msg.content["arrays"]
    assert isinstance(arrays, ArrayRecord)
    glob = arrays.to_torch_state_dict()
    net = _net()
    net.load_state_dict(glob)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(pid)
    for _ in range(3):
        for batch in shard[torch.randperm(len(shard), generator=gen)].split(32):
            if len(batch) > 1:  # BatchNorm needs two samples
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[batch]), y[batch]).backward()
                opt.step()
    state = net.state_dict()
    if pid in MALICIOUS:  # sign flipping: send theta_g - (theta_k - theta_g)
        state = {k: 2 * glob[k] - v if v.is_floating_point() else v for k, v in state.items()}
    metrics = MetricRecord({"num-examples": len(shard), "partition-id": pid})
    return Message(RecordDict({"arrays": ArrayRecord(state), "metrics": metrics}), reply_to=msg)


def _accuracy(state: dict[str, torch.Tensor]) -> float:
    x, y = _digits()
    net = _net()
    net.load_state_dict(state)
    net.eval()
    with torch.no_grad():
        pred = net(x[PUBLIC : PUBLIC + TEST]).argmax(dim=1)
    return float((pred == y[PUBLIC : PUBLIC + TEST]).float().mean())


def test_sdea_flags_sign_flippers_in_flower_simulation():
    # Prepare: the ServerApp runs in a thread of this process, so it can fill `out`.
    # Ship this module to the Ray actors by value, so they never need to import tests/.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out: dict = {}
    x, _ = _digits()
    torch.manual_seed(0)
    initial = ArrayRecord(_net().state_dict())
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = SDEA(
            model_fn=_net, public_x=x[:PUBLIC], augment=_augment, epochs=3, seed=0,
            fraction_evaluate=0.0, min_available_nodes=NUM_CLIENTS, min_train_nodes=NUM_CLIENTS,
        )
        result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=NUM_ROUNDS, timeout=120,
                                train_config=ConfigRecord({}))
        out["history"], out["arrays"] = strategy.history, result.arrays

    # Execute
    run_simulation(
        server_app=server_app, client_app=client_app, num_supernodes=NUM_CLIENTS,
        # address "local": a fresh Ray here even while a cluster runs on this machine (ray.init
        # would otherwise join it and refuse num_cpus).
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 1, "address": "local"}},
    )

    # Assert
    assert [h["round"] for h in out["history"]] == [1, 2]
    for entry in out["history"]:
        assert entry["id_source"] == "partition-id" and entry["client_ids"] == list(range(NUM_CLIENTS))
        flagged = {cid for cid, f in zip(entry["client_ids"], entry["flagged"]) if f}
        assert flagged == MALICIOUS
        assert all(entry["weights"][cid] == 0.0 for cid in MALICIOUS)
        assert max(entry["learned"][4:]) < min(entry["learned"][:4])
    assert _accuracy(out["arrays"].to_torch_state_dict()) > 0.8
