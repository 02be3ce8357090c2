"""Tests for the Byzantine attacks (strategies.attacks, strategies.omniscient)."""

import pytest
import torch
from scipy.stats import norm

from testbed.strategies.attacks import ATTACKS, poison_labels, poison_updates, random_model_vector
from testbed.strategies.omniscient import lie, lie_z, min_max, min_sum


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
