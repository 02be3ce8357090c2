"""Server-optimizer state survives a checkpoint: FedAdam restored from one aggregates as the original."""

import time

import torch
from flwr.app import ArrayRecord, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from testbed.federated.optimizer_state import optimizer_checkpoint, restore_optimizer


def _reply(state: dict, node_id: int) -> Message:
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": 10})})
    meta = Metadata(run_id=1, message_id=f"m{node_id}", src_node_id=node_id, dst_node_id=0, reply_to_message_id="i",
                    group_id="1", created_at=time.time(), ttl=60.0, message_type=MessageType.TRAIN)
    return Message(content, metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def _round(strategy, server_round: int, global_state: dict) -> dict:
    # as configure_train sets it: FedOpt keeps numpy arrays, FedAvgM the record
    strategy.current_arrays = (ArrayRecord(global_state) if isinstance(strategy, flower.FedAvgM)
                               else {k: v.numpy() for k, v in global_state.items()})
    gen = torch.Generator().manual_seed(server_round)
    replies = [_reply({k: v + torch.randn(v.shape, generator=gen) for k, v in global_state.items()}, node)
               for node in (1, 2, 3)]
    arrays, _ = strategy.aggregate_train(server_round, replies)
    return arrays.to_torch_state_dict()


def test_fedadam_and_fedavgm_continue_from_a_checkpoint_as_if_never_stopped():
    for make in (lambda: flower.FedAdam(eta=0.1), lambda: flower.FedAvgM(server_momentum=0.9)):
        state = {"w": torch.zeros(4, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64)}
        original = make()
        for r in (1, 2):
            state = _round(original, r, state)
        checkpoint = torch.load(_saved(optimizer_checkpoint(original)), weights_only=True)
        assert checkpoint  # FedAdam: m_t and v_t; FedAvgM: momentum_vector
        resumed = make()
        restore_optimizer(resumed, checkpoint)
        fresh = make()
        after_original, after_resumed, after_fresh = (_round(s, 3, state) for s in (original, resumed, fresh))
        assert all(torch.equal(after_original[k], after_resumed[k]) for k in state)
        assert not all(torch.equal(after_original[k], after_fresh[k]) for k in state)  # the moments matter


def _saved(value: dict):
    import io

    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return buffer
