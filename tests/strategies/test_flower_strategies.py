"""Tests for the Flower Message-API strategies (strategies.flower), without a simulation.

Replies are built directly with Flower's Metadata so ``aggregate_train`` can be
called as the Flower ``Strategy.start`` loop would call it.
"""

import time

import pytest
import torch
from flwr.app import ArrayRecord, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.app.typing import MetricRecordValues

from testbed.strategies import RFA, SDEA, DnC, FLTrust, ServerSideAttack

GLOBAL = {"w": torch.zeros(2, 3), "b": torch.zeros(2)}


def _reply(state: dict, node_id: int, num_examples: int = 10, partition_id: int | None = None) -> Message:
    metrics: dict[str, MetricRecordValues] = {"num-examples": num_examples, "loss": 1.0}
    if partition_id is not None:
        metrics["partition-id"] = partition_id
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord(metrics)})
    meta = Metadata(
        run_id=1, message_id=f"m{node_id}", src_node_id=node_id, dst_node_id=0, reply_to_message_id="i",
        group_id="1", created_at=time.time(), ttl=60.0, message_type=MessageType.TRAIN,
    )
    return Message(content, metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def _honest_and_outlier(with_pid: bool = True) -> list[Message]:
    """Partitions 0-3 send w = 1 (+ small noise); partition 4 sends w = -10; replies shuffled."""
    gen = torch.Generator().manual_seed(0)
    replies = []
    for pid in [3, 0, 4, 1, 2]:
        value = -10.0 if pid == 4 else 1.0
        state = {"w": value + 0.01 * torch.randn(2, 3, generator=gen), "b": torch.full((2,), value)}
        node_id = 1000 - 7 * pid  # node ids sort in the opposite order to partition ids
        replies.append(_reply(state, node_id, partition_id=pid if with_pid else None))
    return replies


def _start(strategy):
    strategy.global_arrays = ArrayRecord({k: v.clone() for k, v in GLOBAL.items()})
    return strategy


def test_dnc_orders_by_partition_id_and_filters_outlier():
    # Prepare
    strategy = _start(DnC(num_malicious_nodes=1))
    # Execute
    arrays, metrics = strategy.aggregate_train(1, _honest_and_outlier())
    # Assert
    entry = strategy.history[-1]
    assert entry["client_ids"] == [0, 1, 2, 3, 4] and entry["id_source"] == "partition-id"
    assert entry["flagged"] == [False, False, False, False, True]
    assert entry["weights"][4] == 0.0
    assert torch.allclose(arrays.to_torch_state_dict()["b"], torch.ones(2))
    assert metrics["num-flagged"] == 1 and "partition-id" not in metrics


def test_falls_back_to_node_id_order():
    strategy = _start(DnC(num_malicious_nodes=1))
    strategy.aggregate_train(1, _honest_and_outlier(with_pid=False))
    entry = strategy.history[-1]
    assert entry["id_source"] == "node-id"
    assert entry["client_ids"] == sorted(entry["client_ids"])
    assert entry["flagged"][0]  # the outlier has the smallest node id


def test_rfa_returns_robust_median():
    strategy = _start(RFA())
    arrays, _ = strategy.aggregate_train(1, _honest_and_outlier())
    b = arrays.to_torch_state_dict()["b"]
    assert torch.allclose(b, torch.ones(2), atol=1e-2)  # the mean would be -1.2
    assert sum(strategy.history[-1]["weights"]) == pytest.approx(1.0)


def test_fltrust_uses_server_update_fn():
    calls = []

    def server_update_fn(state, server_round):
        calls.append(server_round)
        return {k: v + 1.0 for k, v in state.items()}  # root data says "move towards +1"

    strategy = _start(FLTrust(server_update_fn=server_update_fn))
    arrays, metrics = strategy.aggregate_train(2, _honest_and_outlier())
    assert calls == [2]
    assert strategy.history[-1]["flagged"] == [False, False, False, False, True]
    assert strategy.history[-1]["trust"][4] == 0.0
    assert torch.allclose(arrays.to_torch_state_dict()["b"], torch.ones(2), atol=1e-2)
    assert metrics["num-flagged"] == 1


def test_server_side_attack_is_injected_before_the_rule():
    # All honest; the server simulation sign-flips partition 2, which DnC then removes.
    gen = torch.Generator().manual_seed(0)
    states = [{"w": 1 + 0.01 * torch.randn(2, 3, generator=gen), "b": torch.ones(2)} for _ in range(5)]
    replies = [_reply(state, 50 + p, partition_id=p) for p, state in enumerate(states)]
    strategy = _start(DnC(num_malicious_nodes=1, attack=ServerSideAttack("sign_flip", {2}, {"scale": 5.0})))
    strategy.aggregate_train(1, replies)
    assert strategy.history[-1]["flagged"] == [False, False, True, False, False]
    with pytest.raises(ValueError, match="valid"):
        ServerSideAttack("flip_everything", {0})


def test_random_noise_attack_uploads_the_init_as_full_model():
    # DnC with f = 0 keeps everyone, i.e. a plain mean of the (attacked) uploads.
    init = torch.zeros(8)  # flat [w (6), b (2)]
    strategy = DnC(num_malicious_nodes=0, attack=ServerSideAttack("random_noise", {1}, {"init": init}))
    strategy.global_arrays = ArrayRecord({"w": torch.full((2, 3), 5.0), "b": torch.full((2,), 5.0)})
    replies = [_reply({"w": torch.full((2, 3), 6.0), "b": torch.full((2,), 6.0)}, 9 + p, partition_id=p)
               for p in (0, 1)]
    arrays, _ = strategy.aggregate_train(1, replies)
    # Client 1 uploads the all-zero random model, not global + zeros.
    assert torch.allclose(arrays.to_torch_state_dict()["b"], torch.full((2,), 3.0))


@pytest.mark.parametrize("rule", ["code", "two_group"])
def test_sdea_strategy_flags_sign_flipped_clients(rule):
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (64,), generator=gen)
    public_x = 3.0 * torch.eye(6)[labels] + 0.3 * torch.randn(64, 6, generator=gen)
    good = {"weight": 2.0 * torch.eye(6)[:3], "bias": torch.zeros(3)}
    replies = []
    for pid in range(5):
        sign = -1.0 if pid >= 3 else 1.0
        state = {k: sign * v + 0.01 * torch.randn(v.shape, generator=gen) for k, v in good.items()}
        replies.append(_reply(state, 10 + pid, partition_id=pid))
    strategy = SDEA(model_fn=lambda: torch.nn.Linear(6, 3), public_x=public_x, epochs=5, rule=rule)
    strategy.global_arrays = ArrayRecord({k: torch.zeros_like(v) for k, v in good.items()})
    arrays, metrics = strategy.aggregate_train(1, replies)
    entry = strategy.history[-1]
    assert entry["flagged"] == [False, False, False, True, True]
    assert len(entry["learned"]) == 5 and metrics["num-flagged"] == 2
    weights, learned = entry["weights"], entry["learned"]
    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(weights[1]) == pytest.approx(weights[2])
    aggregate = arrays.to_torch_state_dict()["weight"]
    if rule == "two_group":
        # The ablation zeroes the flagged group: the honest mean comes back.
        assert weights[3:] == [0.0, 0.0]
        assert torch.allclose(aggregate, good["weight"], atol=0.05)
    else:
        # The authors' code lets flagged clients keep their learned weight and
        # shares the rest equally, so the sign-flipped pair still pulls the mix.
        assert weights[3:] == pytest.approx(learned[3:])
        assert 0.0 < weights[3] < weights[0]
        share = sum(weights[:3]) - sum(weights[3:])
        assert torch.allclose(aggregate, share * good["weight"], atol=0.05)


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="rule"):
        SDEA(model_fn=lambda: torch.nn.Linear(2, 2), public_x=torch.zeros(1, 2), rule="both")
    with pytest.raises(ValueError, match="server_update_fn"):
        FLTrust(server_update_fn=None)
    with pytest.raises(RuntimeError, match="global_arrays"):
        DnC(num_malicious_nodes=1).aggregate_train(1, _honest_and_outlier())


def test_krum_pick_shared_by_identical_colluding_uploads_counts_as_weight_one():
    # Prepare: two attackers upload the same model (as under LIE), three honest clients agree
    from flwr.serverapp.strategy import Krum

    from testbed.federated.strategies import registered_strategies

    honest = [{"w": torch.full((2, 3), 1.0 + 0.01 * k), "b": torch.ones(2)} for k in range(3)]
    attacker = {"w": torch.full((2, 3), 1.015), "b": torch.ones(2)}
    replies = [_reply(s, n) for n, s in enumerate(honest + [attacker, attacker])]
    # Execute: Krum's output is the attackers' model
    weights, flagged = registered_strategies()["krum"].client_weights(Krum(), [0, 1, 2, 3, 4], replies,
                                                                    ArrayRecord(attacker), [])
    # Assert
    assert weights == [0.0, 0.0, 0.0, 0.5, 0.5] and sum(weights) == 1.0
    assert flagged == [True, True, True, False, False]


def test_detection_is_reported_only_for_rules_that_flag_clients():
    from testbed.federated.strategies import registered_strategies

    replies = _honest_and_outlier()
    ids = [3, 0, 4, 1, 2]
    for rule_name, rule, flags in (("rfa", RFA(), False), ("dnc", DnC(num_malicious_nodes=1), True)):
        strategy = _start(rule)
        arrays, _ = strategy.aggregate_train(1, replies)
        weights, flagged = registered_strategies()[rule_name].client_weights(strategy, ids, replies, arrays, [])
        assert len(weights) == 5
        assert (flagged is not None) == flags
    assert flagged[ids.index(4)] and sum(flagged) == 1  # DnC flags the outlier alone
