"""The ClientApp: local SGD on the client's shard; the reply names its partition for SDEA's record."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from sdea_app.task import digits, net, shard

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received model for ``local-epochs`` passes over this client's shard."""
    torch.set_num_threads(1)
    pid, partitions = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    rows = shard(pid, partitions, float(context.run_config["dirichlet-beta"]))
    x, y = digits()
    arrays = msg.content["arrays"]
    assert isinstance(arrays, ArrayRecord)
    model = net()
    model.load_state_dict(arrays.to_torch_state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(pid)
    for _ in range(int(context.run_config["local-epochs"])):
        for batch in rows[torch.randperm(len(rows), generator=generator)].split(32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    metrics = MetricRecord({"num-examples": len(rows), "partition-id": pid})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)
