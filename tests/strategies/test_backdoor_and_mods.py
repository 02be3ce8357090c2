"""Backdoor attacks (BadNets, model replacement), the attack success rate, and the attacks as Flower
client mods and as a strategy wrapper, without a simulation (replies built with Flower's Metadata)."""

from __future__ import annotations

import copy
import json
import time

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from testbed.federated.backdoor import backdoor_metrics, boosted_upload
from testbed.federated.client import poisoned_client_data
from testbed.federated.setup import federation_setup
from testbed.scenario import Scenario
from testbed.strategies import ServerSideAttack, ServerSideAttackStrategy, byzantine_mod, poisoned_data
from testbed.strategies.backdoor import badnets, scale_update, stamp_trigger, triggered_test_set
from testbed.workloads.classifier.workload import ClassifierWorkload
from tests.federated.test_federated_runs import FEDERATED


def test_badnets_stamps_a_corner_square_and_relabels_a_share_of_the_samples():
    x, y = torch.zeros(400, 1, 8, 8), torch.arange(400) % 10
    px, py = badnets(x, y, 10, torch.Generator().manual_seed(0), target=3, poison_fraction=0.5, patch_size=2, value=1)
    poisoned = px.flatten(1).sum(dim=1) > 0
    assert 150 < int(poisoned.sum()) < 250
    assert bool((px[poisoned][:, :, -2:, -2:] == 1).all()) and float(px[poisoned].sum()) == 4 * int(poisoned.sum())
    assert bool((py[poisoned] == 3).all()) and torch.equal(py[~poisoned], y[~poisoned])
    assert torch.equal(stamp_trigger(torch.zeros(2, 5), patch_size=2, value=7)[0], torch.tensor([0.0, 7, 7, 7, 7]))


def test_the_triggered_test_set_leaves_out_the_target_class():
    x, y = torch.zeros(6, 1, 4, 4), torch.tensor([0, 1, 2, 0, 3, 0])
    tx, ty = triggered_test_set(x, y, target=0, patch_size=1, value=1.0)
    assert len(ty) == 3 and bool((ty == 0).all()) and bool((tx[:, 0, -1, -1] == 1).all())


def test_model_replacement_boosts_the_update_and_keeps_integer_buffers():
    g = {"w": torch.ones(3), "steps": torch.tensor(4)}
    local = {"w": torch.tensor([2.0, 1.0, 0.0]), "steps": torch.tensor(5)}
    out = scale_update(g, local, 5.0)
    assert torch.equal(out["w"], torch.tensor([6.0, 1.0, -4.0])) and int(out["steps"]) == 5


def _setup(attack: dict):
    data = copy.deepcopy(FEDERATED)
    data["data"]["num_clients"] = 5
    data["federated"]["attack"] = attack
    scenario = Scenario.model_validate(data)
    return scenario, federation_setup(scenario)


def test_attackers_train_on_triggered_data_and_model_replacement_uploads_the_boosted_model():
    scenario, setup = _setup({"name": "model_replacement", "fraction": 0.2, "target": 0})
    (attacker,) = setup.malicious
    honest = next(p for p in range(5) if p != attacker)
    scenario_json = json.dumps(scenario.model_dump(mode="json"), sort_keys=True)
    poisoned = poisoned_client_data(scenario_json, 0, attacker)
    clean = setup.client_data(attacker)
    changed = (poisoned.y != clean.y) | (poisoned.x != clean.x).reshape(len(clean.y), -1).any(axis=1)
    assert 0.3 < changed.mean() < 0.7 and (poisoned.x[changed][:, :, -2:, -2:] == setup.train.x.max()).all()
    assert (poisoned_client_data(scenario_json, 0, honest).y == setup.client_data(honest).y).all()
    g, local = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    assert torch.equal(boosted_upload(setup, attacker, g, local)["w"], torch.full((2,), 5.0))  # N / m = 5 / 1
    assert boosted_upload(setup, honest, g, local) is local


def test_the_attack_success_rate_is_the_share_of_triggered_inputs_sent_to_the_target():
    _, setup = _setup({"name": "badnets", "fraction": 0.2, "target": 2})

    class Constant(torch.nn.Module):
        def __init__(self, label: int):
            super().__init__()
            self.label = label

        def forward(self, x):
            return torch.nn.functional.one_hot(torch.full((len(x),), self.label), 10).float()

    assert backdoor_metrics(setup, ClassifierWorkload, Constant(2)) == {"attack_success_rate": 1.0}
    assert backdoor_metrics(setup, ClassifierWorkload, Constant(5)) == {"attack_success_rate": 0.0}
    _, clean = _setup({"name": "sign_flip", "fraction": 0.2})
    assert backdoor_metrics(clean, ClassifierWorkload, Constant(2)) == {}


def _message(state: dict, pid: int, *, reply: bool, server_round: int = 1) -> Message:
    records: dict[str, ArrayRecord | MetricRecord | ConfigRecord] = {"arrays": ArrayRecord(state)}
    if reply:
        records["metrics"] = MetricRecord({"num-examples": 10, "partition-id": pid})
    else:
        records["config"] = ConfigRecord({"server-round": server_round})
    meta = Metadata(run_id=1, message_id=f"m{pid}{reply}", src_node_id=100 + pid, dst_node_id=0,
                    reply_to_message_id="i" if reply else "", group_id="1", created_at=time.time(), ttl=60.0,
                    message_type=MessageType.TRAIN)
    return Message(RecordDict(records), metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def _context(pid: int) -> Context:
    return Context(run_id=1, node_id=100 + pid, node_config={"partition-id": pid}, state=RecordDict(), run_config={})


def test_a_mod_makes_the_chosen_clients_flip_their_update_and_leaves_the_others_alone():
    mod = byzantine_mod("sign_flip", partition_ids={1}, scale=2.0)
    sent = {"w": torch.tensor([1.0, 1.0])}
    trained = lambda msg, ctx: _message({"w": torch.tensor([2.0, 0.0])}, 0, reply=True)
    attacked = mod(_message(sent, 1, reply=False), _context(1), trained)
    assert torch.equal(attacked.content["arrays"].to_torch_state_dict()["w"], torch.tensor([-1.0, 3.0]))
    honest = mod(_message(sent, 0, reply=False), _context(0), trained)
    assert torch.equal(honest.content["arrays"].to_torch_state_dict()["w"], torch.tensor([2.0, 0.0]))


def test_a_data_attack_mod_poisons_the_data_the_app_passes_through_its_hook():
    mod = byzantine_mod("badnets", partition_ids={1}, target=0, poison_fraction=1.0, patch_size=1, value=9.0)
    x, y = torch.zeros(4, 1, 3, 3), torch.tensor([1, 2, 3, 4])
    seen = {}

    def app(msg, ctx):
        seen["x"], seen["y"] = poisoned_data(ctx, x, y, 10)
        return _message({"w": torch.zeros(1)}, 0, reply=True)

    mod(_message({"w": torch.zeros(1)}, 1, reply=False), _context(1), app)
    assert bool((seen["y"] == 0).all()) and bool((seen["x"][:, 0, -1, -1] == 9).all())
    mod(_message({"w": torch.zeros(1)}, 0, reply=False), _context(0), app)
    assert seen["x"] is x and seen["y"] is y


def test_omniscient_attacks_refuse_to_be_mods_and_name_the_server_side_wrapper():
    with pytest.raises(ValueError, match="ServerSideAttackStrategy"):
        byzantine_mod("lie", partition_ids={0})


def test_the_server_side_wrapper_replaces_the_chosen_replies_before_any_strategy_aggregates():
    seen: dict[int, torch.Tensor] = {}

    class Median(flower.FedMedian):  # FedMedian empties the replies it reads: keep what it was given
        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            for r in replies:
                seen[int(r.content["metrics"]["partition-id"])] = r.content["arrays"].to_torch_state_dict()["w"]
            return super().aggregate_train(server_round, replies)

    strategy = ServerSideAttackStrategy(Median(), ServerSideAttack("lie", {3}, {"z": 1.0}))
    strategy.global_arrays = ArrayRecord({"w": torch.zeros(2)})  # what configure_train keeps
    arrays, _ = strategy.aggregate_train(1, [_message({"w": torch.tensor([float(p), 1.0])}, p, reply=True)
                                             for p in range(4)])
    benign = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
    assert torch.allclose(seen[3], benign.mean(dim=0) - benign.std(dim=0))  # LIE from the benign replies
    assert torch.equal(seen[0], torch.tensor([0.0, 1.0]))
    assert arrays is not None
