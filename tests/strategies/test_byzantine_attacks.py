"""Tests for the Byzantine attacks (strategies.attacks, strategies.omniscient, strategies.marsfl)."""

import math
import time
from types import SimpleNamespace

import pytest
import torch
from flwr.app import ArrayRecord, Message, MessageType, Metadata, MetricRecord, RecordDict
from scipy.stats import norm

from testbed.federated.client import PARTITION_KEY
from testbed.federated.config import AttackBlock
from testbed.federated.server import RoundLoop
from testbed.seeding import SeedTree
from testbed.strategies import marsfl
from testbed.strategies.attacks import ATTACKS, poison_labels, poison_updates, random_model_vector
from testbed.strategies.omniscient import lie, lie_z, min_max, min_sum
from testbed.strategies.vectors import flatten_state, unflatten_state


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _benign(n: int = 8, dim: int = 30, seed: int = 0) -> torch.Tensor:
    return 0.5 + torch.randn(n, dim, generator=_gen(seed))


def test_registry_kinds():
    assert {n for n, a in ATTACKS.items() if a.kind == "data"} == {"pair_flip", "sym_flip"}
    assert {n for n, a in ATTACKS.items() if a.omniscient} == {"lie", "min_max", "min_sum"}


def test_pair_flip_full_rate_shifts_every_label():
    labels = torch.arange(10).repeat(3)
    out = poison_labels("pair_flip", labels, 10, _gen(), rate=1.0)
    assert torch.equal(out, (labels + 1) % 10)


def test_pair_flip_half_rate_flips_about_half_to_next_class():
    labels = torch.randint(0, 5, (4000,), generator=_gen(1))
    out = poison_labels("pair_flip", labels, 5, _gen(2), rate=0.5)
    changed = out != labels
    assert 0.45 < changed.float().mean() < 0.55
    assert torch.equal(out[changed], (labels[changed] + 1) % 5)
    # Same seed, same labels.
    assert torch.equal(out, poison_labels("pair_flip", labels, 5, _gen(2), rate=0.5))


def test_sym_flip_full_rate_moves_to_every_other_class():
    labels = torch.zeros(3000, dtype=torch.long)
    out = poison_labels("sym_flip", labels, 4, _gen(), rate=1.0)
    assert (out != 0).all()
    counts = torch.bincount(out, minlength=4)[1:].float() / 3000
    assert torch.allclose(counts, torch.full((3,), 1 / 3), atol=0.04)


def test_label_attacks_validate_parameters():
    with pytest.raises(ValueError, match="rate"):
        poison_labels("sym_flip", torch.zeros(3, dtype=torch.long), 4, _gen(), rate=1.5)
    with pytest.raises(ValueError, match="labels"):
        poison_labels("pair_flip", torch.tensor([0, 7]), 4, _gen())
    with pytest.raises(ValueError, match="valid: .*pair_flip"):
        poison_labels("sign_flip", torch.zeros(3, dtype=torch.long), 4, _gen())


def test_sign_flip_negates_only_malicious_rows():
    updates = _benign(4, 5)
    mask = torch.tensor([False, True, False, True])
    out = poison_updates("sign_flip", updates, mask)
    assert torch.equal(out[mask], -updates[mask])
    assert torch.equal(out[~mask], updates[~mask])


def test_gaussian_replaces_with_seeded_noise_of_given_scale():
    updates = torch.zeros(3, 20000)
    mask = torch.tensor([True, False, False])
    out = poison_updates("gaussian", updates, mask, _gen(5), sigma=2.0)
    assert abs(float(out[0].std()) - 2.0) < 0.05
    assert torch.equal(out, poison_updates("gaussian", updates, mask, _gen(5), sigma=2.0))


def test_random_model_uploads_the_seeded_random_init():
    init = random_model_vector(lambda: torch.nn.Linear(3, 2), seed=7)
    state_before = torch.random.get_rng_state()
    again = random_model_vector(lambda: torch.nn.Linear(3, 2), seed=7)
    assert torch.equal(torch.random.get_rng_state(), state_before)  # global RNG untouched
    assert torch.equal(init, again) and init.numel() == 8
    updates = torch.ones(2, 8)
    out = poison_updates("random_noise", updates, torch.tensor([True, True]), init=init)
    assert torch.equal(out, init.expand(2, -1))
    with pytest.raises(ValueError, match="init"):
        poison_updates("random_noise", updates, torch.tensor([True, False]))


def test_add_noise_moves_halfway_to_random_model():
    updates = torch.tensor([[2.0, 2.0], [1.0, 1.0]])
    out = poison_updates("add_noise", updates, torch.tensor([True, False]), init=torch.tensor([0.0, 4.0]))
    assert torch.equal(out[0], torch.tensor([1.0, 3.0]))


def test_lie_z_matches_baruch_formula():
    # n=50, f=10: s = floor(26) - 10 = 16, z = Phi^-1(34/50).
    assert lie_z(50, 10) == pytest.approx(norm.ppf(34 / 50), abs=1e-6)
    with pytest.raises(ValueError, match="num_malicious"):
        lie_z(10, 0)


def test_lie_is_mean_minus_z_std_within_band():
    benign = _benign(8)
    mal = lie(torch.zeros(2, 30), benign)
    z = lie_z(10, 2)
    mu, sd = benign.mean(0), benign.std(0)
    assert torch.allclose(mal[0], mu - z * sd) and torch.equal(mal[0], mal[1])
    assert torch.all(mal >= mu - abs(z) * sd - 1e-6) and torch.all(mal <= mu + abs(z) * sd + 1e-6)


@pytest.mark.parametrize("direction", ["unit", "std", "sign"])
def test_min_max_stays_within_max_benign_distance(direction):
    benign = _benign()
    mal = min_max(torch.zeros(1, 30), benign, direction=direction)[0]
    threshold = torch.cdist(benign, benign).max()
    max_dist = torch.linalg.vector_norm(benign - mal, dim=1).max()
    assert max_dist <= threshold + 1e-5
    # The search pushes gamma to the constraint, so the attack is far from the mean.
    assert max_dist > 0.99 * threshold
    assert not torch.allclose(mal, benign.mean(0))


def test_min_sum_stays_within_max_benign_sum_of_squares():
    benign = _benign()
    mal = min_sum(torch.zeros(2, 30), benign)
    threshold = (torch.cdist(benign, benign) ** 2).sum(dim=1).max()
    total = (torch.linalg.vector_norm(benign - mal[0], dim=1) ** 2).sum()
    assert total <= threshold * (1 + 1e-6)
    assert total > 0.99 * threshold
    assert torch.equal(mal[0], mal[1])


def test_omniscient_attacks_validate_inputs():
    with pytest.raises(ValueError, match="direction"):
        min_max(torch.zeros(1, 3), _benign(3, 3), direction="random")
    with pytest.raises(ValueError, match="benign"):
        min_sum(torch.zeros(1, 3), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="malicious_mask"):
        poison_updates("lie", torch.zeros(3, 2), torch.tensor([True]))


# Threat model "marsfl": the attacks as SDEA's authors' MarsFL code plays them (strategies.marsfl).

ONE_D = torch.tensor([[0.0], [2.0], [4.0]])  # mean 2; |b - mean| = 2, 0, 2; largest pairwise distance 4


def test_marsfl_lie_z_is_about_zero_where_baruch_is_not():
    # SDEA's setting, 10 clients of which 2 malicious: s = 10 // 2 + 1 - 2 = 4.
    assert marsfl.lie_z(10, 2) == pytest.approx(math.exp(-16) * math.sqrt(math.pi / 2), rel=1e-12)
    assert marsfl.lie_z(10, 2) < 1e-6 and lie_z(10, 2) == pytest.approx(norm.ppf(0.6), abs=1e-6)
    assert marsfl.lie_z(10, 5) == pytest.approx(math.exp(-1) * math.sqrt(math.pi / 2))  # s = 1


def test_marsfl_lie_adds_z_std_to_the_benign_mean():
    benign = torch.tensor([[0.0, 0.0], [2.0, 4.0]])  # mean [1, 2], unbiased std [sqrt 2, 2 sqrt 2]
    mu, sd = torch.tensor([1.0, 2.0]), torch.tensor([math.sqrt(2), 2 * math.sqrt(2)])
    z = math.exp(-1) * math.sqrt(math.pi / 2)  # n = 3, m = 1: s = 1
    mal = marsfl.lie(torch.zeros(1, 2), benign)
    assert torch.allclose(mal[0], mu + z * sd)
    assert torch.allclose(lie(torch.zeros(1, 2), benign)[0], mu - lie_z(3, 1) * sd)  # faithful: minus, Phi^-1
    assert torch.allclose(marsfl.lie(torch.zeros(2, 2), benign, z=1.0), (mu + sd).expand(2, -1))


def test_marsfl_min_sum_stays_at_the_smallest_benign_score():
    # Threshold min_i sum_j |b_i - b_j|^2 = 8, the mean's own score: only gamma = 0 passes (and, in
    # float32, gammas below ~6e-4, whose 3 gamma^2 is lost next to 8).
    assert marsfl.min_sum(torch.zeros(1, 1), ONE_D, direction="unit")[0, 0] == pytest.approx(2.0, abs=1e-3)
    # Faithful threshold (the largest score, 20): gamma -> 2, the upload -> 0.
    assert min_sum(torch.zeros(1, 1), ONE_D, direction="unit")[0, 0] == pytest.approx(0.0, abs=1e-4)
    # In general gamma = min_i |b_i - mean| / |dev| (dev = std here).
    benign = _benign()
    mu, sd = benign.mean(0), benign.std(0)
    gamma = torch.linalg.vector_norm(mu - marsfl.min_sum(torch.zeros(1, 30), benign)[0]) / sd.norm()
    assert float(gamma) == pytest.approx(float(torch.linalg.vector_norm(benign - mu, dim=1).min() / sd.norm()),
                                         abs=1e-4)


def test_marsfl_min_max_has_the_faithful_bound_and_a_longer_search():
    assert marsfl.min_max(torch.zeros(1, 1), ONE_D, direction="unit")[0, 0] == pytest.approx(0.0, abs=1e-4)
    # With a coarse tol the searches differ: MarsFL tests gamma = 1 and 1.5, the faithful one only 1.
    coarse = {"direction": "unit", "gamma_init": 1.0, "tol": 0.3}
    assert float(marsfl.min_max(torch.zeros(1, 1), ONE_D, **coarse)[0, 0]) == 0.5
    assert float(min_max(torch.zeros(1, 1), ONE_D, **coarse)[0, 0]) == 1.0


def _bn_then_linear() -> torch.nn.Module:
    """A model whose buffers come before a parameter: bn.weight, bn.bias, 3 buffers, linear.weight, linear.bias."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 1))


def test_write_into_parameters_fills_the_parameters_in_order_and_keeps_the_buffers():
    state = _bn_then_linear().state_dict()
    is_param = marsfl.parameter_mask(state, {"0.weight", "0.bias", "1.weight", "1.bias"})
    assert is_param.tolist() == [True] * 4 + [False] * 5 + [True] * 3
    out = unflatten_state(marsfl.write_into_parameters(torch.arange(12.0)[None], torch.full((1, 12), -1.0),
                                                       is_param)[0], state)
    assert out["0.weight"].tolist() == [0, 1] and out["0.bias"].tolist() == [2, 3]
    assert out["1.weight"].tolist() == [[4, 5]] and out["1.bias"].tolist() == [6]  # the crafted row's entries 4-6
    assert out["0.running_mean"].tolist() == [-1, -1] and int(out["0.num_batches_tracked"]) == -1


def _reply(state: dict, pid: int) -> Message:
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({PARTITION_KEY: pid})})
    meta = Metadata(run_id=1, message_id=f"m{pid}", src_node_id=pid + 1, dst_node_id=0, reply_to_message_id="i",
                    group_id="1", created_at=time.time(), ttl=60.0, message_type=MessageType.TRAIN)
    return Message(content, metadata=meta)  # type: ignore[call-overload]  # flwr's overloads omit metadata=


def _inject(threat_model: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Play LIE through `RoundLoop._inject_attack` on 5 clients (partition 4 malicious) around a global
    model of tens; returns the malicious upload, the benign updates and the malicious client's honest state."""
    template = _bn_then_linear().state_dict()
    global_vector = flatten_state(template) * 0 + 10.0
    gen = torch.Generator().manual_seed(1)
    honest = global_vector + torch.randn(5, global_vector.numel(), generator=gen).round()
    loop = RoundLoop.__new__(RoundLoop)
    attack = AttackBlock(name="lie", fraction=0.2, threat_model=threat_model)
    loop.setup = SimpleNamespace(  # type: ignore[assignment]
        scenario=SimpleNamespace(federated=SimpleNamespace(attack=attack)), malicious=frozenset({4}),
        num_clients=5, seeds=SeedTree(0), build_model=_bn_then_linear)
    loop.state = unflatten_state(global_vector, template)
    replies = [_reply(unflatten_state(row, template), pid) for pid, row in enumerate(honest)]
    loop._inject_attack(1, replies)
    upload = flatten_state(replies[4].content["arrays"].to_torch_state_dict())  # type: ignore[union-attr]
    assert all(torch.equal(flatten_state(replies[i].content["arrays"].to_torch_state_dict()),  # type: ignore[union-attr]
                           honest[i]) for i in range(4))  # benign uploads untouched
    return upload, honest[:4] - global_vector, honest[4]


def test_server_marsfl_uploads_the_crafted_update_as_parameters():
    upload, benign, honest = _inject("marsfl")
    z = math.exp(-4) * math.sqrt(math.pi / 2)  # n = 5, m = 1: s = 2
    crafted = benign.mean(0) + z * benign.std(0)
    is_param = torch.tensor([True] * 4 + [False] * 5 + [True] * 3)
    assert torch.allclose(upload[is_param], crafted[:7])  # no global added back: a network near zero
    assert upload[is_param].abs().max() < 3 and torch.equal(upload[~is_param], honest[~is_param].round())
    faithful, benign, _ = _inject("faithful")
    floats = torch.arange(12) != 8  # num_batches_tracked, rounded back to an integer
    expected = 10.0 + benign.mean(0) - lie_z(5, 1) * benign.std(0)
    assert lie_z(5, 1) > 0.25 and torch.allclose(faithful[floats], expected[floats])
