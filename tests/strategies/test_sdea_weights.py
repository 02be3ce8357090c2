"""Tests for SDEA's learned aggregation weights (strategies.sdea)."""

import math

import pytest
import torch

from testbed.strategies.sdea import cooperative_weights, entropy_objective, learn_weights, mix_states, sdea_weights

NUM_CLASSES, DIM = 4, 8


def _public_blobs(n: int = 128) -> torch.Tensor:
    """Unlabelled points around 3*e_c for classes c = 0..3."""
    gen = torch.Generator().manual_seed(0)
    centres = 3.0 * torch.eye(DIM)[:NUM_CLASSES]
    idx = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    return centres[idx] + 0.5 * torch.randn(n, DIM, generator=gen)


def _linear() -> torch.nn.Module:
    return torch.nn.Linear(DIM, NUM_CLASSES)


def _clients() -> list[dict[str, torch.Tensor]]:
    """Three honest prototype classifiers (with small noise) and two sign-flipped ones."""
    gen = torch.Generator().manual_seed(1)
    good_w = 2.0 * torch.eye(DIM)[:NUM_CLASSES]
    honest = [
        {"weight": good_w + 0.02 * torch.randn(good_w.shape, generator=gen), "bias": torch.zeros(NUM_CLASSES)}
        for _ in range(3)
    ]
    flipped = [{"weight": -s["weight"], "bias": -s["bias"]} for s in honest[:2]]
    return honest + flipped


def _mlp_bn() -> torch.nn.Module:
    nn = torch.nn
    return nn.Sequential(nn.Linear(DIM, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, NUM_CLASSES))


def _seeded() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _jitter(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return x + 0.1 * torch.randn(x.shape, generator=gen)


def test_entropy_objective_prefers_confident_diverse_predictions():
    # Prepare: uniform predictions vs one confident prediction per class.
    uniform = torch.zeros(4, NUM_CLASSES)
    confident = 50.0 * torch.eye(NUM_CLASSES)
    # Execute / Assert: uniform gives EH = HE = log C; confident-diverse gives -log C.
    assert abs(float(entropy_objective(uniform))) < 1e-3
    assert float(entropy_objective(confident)) == pytest.approx(-math.log(NUM_CLASSES), abs=1e-3)


def test_mix_states_mixes_parameters_and_running_stats():
    bn_a, bn_b = torch.nn.BatchNorm1d(2), torch.nn.BatchNorm1d(2)
    bn_a.running_mean.fill_(1.0)
    bn_b.running_mean.fill_(5.0)
    bn_b.weight.data.fill_(3.0)
    states = [bn_a.state_dict(), bn_b.state_dict()]
    stacks = {k: torch.stack([s[k] for s in states]) for k in states[0] if states[0][k].is_floating_point()}
    fixed = {"num_batches_tracked": states[0]["num_batches_tracked"]}
    mixed = mix_states(stacks, torch.tensor([0.75, 0.25]), fixed)
    assert torch.allclose(mixed["running_mean"], torch.full((2,), 2.0))
    assert torch.allclose(mixed["weight"], torch.full((2,), 1.5))
    assert "num_batches_tracked" in mixed


def test_learned_weights_favour_honest_clients_and_are_deterministic():
    clients, public_x = _clients(), _public_blobs()
    learned = learn_weights(_linear, clients, public_x, _jitter, epochs=5, generator=_seeded())
    again = learn_weights(_linear, clients, public_x, _jitter, epochs=5, generator=_seeded())
    assert torch.equal(learned, again)
    assert abs(float(learned.sum()) - 1.0) < 1e-5
    assert learned[:3].min() > learned[3:].max()


def test_sdea_weights_two_group_rule_zeroes_sign_flipped_clients():
    weights, mask = sdea_weights(_linear, _clients(), _public_blobs(), _jitter, epochs=5, generator=_seeded(),
                                 rule="two_group")
    assert mask.tolist() == [False, False, False, True, True]
    assert torch.allclose(weights, torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0, 0.0]))


def test_sdea_runs_through_batchnorm_model():
    torch.manual_seed(0)
    states = [_mlp_bn().state_dict() for _ in range(3)]
    learned = learn_weights(_mlp_bn, states, _public_blobs(64), None, epochs=1)
    assert learned.shape == (3,) and torch.isfinite(learned).all()
    assert not torch.allclose(learned, torch.full((3,), 1 / 3))  # gradients reached M


def test_batchnorm_train_mode_normalises_by_the_public_batch_and_leaves_the_clients_alone():
    torch.manual_seed(0)
    states = [_mlp_bn().state_dict() for _ in range(3)]
    for i, state in enumerate(states):  # running statistics far from the public batches'
        state["1.running_mean"].fill_(10.0 * (i + 1))
    before = [{k: v.clone() for k, v in s.items()} for s in states]
    public = _public_blobs(64)
    train = learn_weights(_mlp_bn, states, public, None, epochs=2, bn_mode="train")
    evaluated = learn_weights(_mlp_bn, states, public, None, epochs=2, bn_mode="eval")
    assert not torch.allclose(train, evaluated)  # the mode decides which statistics normalise
    # Batch norm updates the running statistics it is given in place: never the clients' own.
    assert all(torch.equal(s[k], b[k]) for s, b in zip(states, before) for k in s)
    with pytest.raises(ValueError, match="bn_mode.*valid"):
        learn_weights(_mlp_bn, states, public, None, epochs=1, bn_mode="frozen")


def test_code_rule_is_the_default_and_keeps_the_flagged_clients_learned_weight():
    # Two attackers at the bottom (the LIE picture: the four lowest weights are the attackers).
    learned = torch.tensor([0.14, 0.15, 0.16, 0.15, 0.14, 0.16, 0.05, 0.05])
    weights, mask = cooperative_weights(learned)
    assert mask.tolist() == [False] * 6 + [True, True]
    assert torch.allclose(weights[6:], torch.tensor([0.05, 0.05]))
    assert torch.allclose(weights[:6], torch.full((6,), 0.9 / 6))
    assert abs(float(weights.sum()) - 1.0) < 1e-6


def test_cooperative_weights_two_group_vs_code_rule():
    learned = torch.tensor([0.20, 0.21, 0.20, 0.19, 0.10, 0.10])
    paper_w, paper_mask = cooperative_weights(learned, "two_group")
    code_w, code_mask = cooperative_weights(learned, "code")
    expected_mask = [False, False, False, False, True, True]
    assert paper_mask.tolist() == expected_mask and code_mask.tolist() == expected_mask
    assert torch.allclose(paper_w, torch.tensor([0.25, 0.25, 0.25, 0.25, 0.0, 0.0]))
    # Code rule: flagged keep their learned weight, the rest share what is left.
    assert torch.allclose(code_w, torch.tensor([0.2, 0.2, 0.2, 0.2, 0.1, 0.1]))


def test_two_group_rule_merges_to_two_groups_where_code_keeps_finest():
    # Finest FINCH partition: {0.02,0.03} {0.10,0.11} {0.30,0.31,0.32}.
    learned = torch.tensor([0.02, 0.03, 0.10, 0.11, 0.30, 0.31, 0.32])
    _, paper_mask = cooperative_weights(learned, "two_group")
    _, code_mask = cooperative_weights(learned, "code")
    assert code_mask.tolist() == [True, True, False, False, False, False, False]
    assert paper_mask.tolist() == [True, True, True, True, False, False, False]


def test_single_cluster_falls_back_to_uniform():
    weights, mask = cooperative_weights(torch.full((4,), 0.25))
    assert torch.allclose(weights, torch.full((4,), 0.25)) and not mask.any()


def test_unknown_rule_raises():
    with pytest.raises(ValueError, match="valid: .*two_group"):
        sdea_weights(_linear, _clients(), _public_blobs(), None, epochs=0, rule="median")
