"""Tests for the pure aggregation rules in strategies.robust (DnC, RFA, FLTrust, mean)."""

import pytest
import torch

from testbed.strategies.robust import dnc, fltrust, geometric_median, mean


def _cluster_with_outlier(n_honest: int = 5, dim: int = 40, seed: int = 0) -> torch.Tensor:
    """Honest updates near (1, ..., 1) plus one far-away row at the end."""
    gen = torch.Generator().manual_seed(seed)
    honest = 1.0 + 0.01 * torch.randn(n_honest, dim, generator=gen)
    outlier = torch.full((1, dim), -20.0)
    return torch.cat([honest, outlier])


def test_mean_is_weighted_average():
    # Prepare
    updates = torch.tensor([[0.0, 0.0], [4.0, 8.0]])
    # Execute
    result = mean(updates, torch.tensor([3.0, 1.0]))
    # Assert
    assert torch.allclose(result.update, torch.tensor([1.0, 2.0]))
    assert torch.allclose(result.weights, torch.tensor([0.75, 0.25]))
    assert not result.flagged.any()


def test_dnc_removes_obvious_outlier():
    updates = _cluster_with_outlier()
    result = dnc(updates, num_malicious=1)
    assert result.flagged.tolist() == [False] * 5 + [True]
    assert result.weights[-1] == 0
    assert torch.allclose(result.update, updates[:5].mean(dim=0), atol=1e-6)


def test_dnc_subsampled_dims_and_iterations_still_remove_outlier():
    updates = _cluster_with_outlier(dim=200)
    gen = torch.Generator().manual_seed(3)
    result = dnc(updates, num_malicious=1, sub_dim=20, num_iters=3, generator=gen)
    assert result.flagged[-1]
    # Intersection over iterations can only remove more, never fewer, than c*f.
    assert int(result.flagged.sum()) >= 1


def test_dnc_filter_frac_removes_c_times_f():
    updates = _cluster_with_outlier()
    result = dnc(updates, num_malicious=1, filter_frac=2.0)
    assert int(result.flagged.sum()) == 2
    assert result.flagged[-1]


def test_dnc_rejects_removing_everyone():
    with pytest.raises(ValueError, match="num_malicious"):
        dnc(torch.zeros(3, 4), num_malicious=3)


def test_geometric_median_of_collinear_points_is_middle_point():
    # The mean (33.67) is dragged by the outlier; the geometric median is not.
    updates = torch.tensor([[0.0], [1.0], [100.0]])
    result = geometric_median(updates)
    assert abs(float(result.update[0]) - 1.0) < 1e-3
    assert not result.flagged.any()


def test_geometric_median_of_symmetric_points_is_centre():
    updates = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.0]]) + 5.0
    result = geometric_median(updates)
    assert torch.allclose(result.update, torch.tensor([5.0, 5.0]), atol=1e-4)
    assert abs(float(result.weights.sum()) - 1.0) < 1e-6


def test_geometric_median_respects_weights():
    # Weighted 1-D median: the heavy point wins.
    updates = torch.tensor([[0.0], [10.0]])
    result = geometric_median(updates, torch.tensor([9.0, 1.0]))
    assert abs(float(result.update[0])) < 1e-3


def test_fltrust_gives_zero_weight_to_opposite_update():
    server = torch.tensor([1.0, 1.0])
    updates = torch.tensor([[2.0, 2.0], [-1.0, -1.0], [1.0, 0.0]])
    result = fltrust(updates, server_update=server)
    assert result.flagged.tolist() == [False, True, False]
    assert result.weights[1] == 0
    assert torch.all(result.weights[[0, 2]] > 0)


def test_fltrust_normalises_magnitude_to_server_norm():
    server = torch.tensor([3.0, 4.0])  # norm 5
    updates = torch.tensor([[300.0, 400.0], [0.3, 0.4]])
    result = fltrust(updates, server_update=server)
    # Both point the server's way, so after rescaling both equal the server update.
    assert torch.allclose(result.update, server, atol=1e-5)


def test_fltrust_all_untrusted_gives_zero_update():
    result = fltrust(torch.tensor([[-1.0, 0.0], [0.0, -1.0]]), server_update=torch.tensor([1.0, 1.0]))
    assert torch.equal(result.update, torch.zeros(2))
    assert result.flagged.all()


def test_fltrust_zero_update_is_untrusted_and_leaves_the_aggregate_finite():
    # A client that uploads the global model back sends a zero update (SDEA's random-noise
    # attacker does in round 1); the other clients' rescaled mean must come out untouched.
    server = torch.tensor([3.0, 4.0])
    updates = torch.tensor([[0.3, 0.4], [0.0, 0.0], [6.0, 8.0]])
    result = fltrust(updates, server_update=server)
    assert result.flagged.tolist() == [False, True, False]
    assert torch.allclose(result.update, server, atol=1e-5)


def test_bad_weights_and_shapes_raise():
    with pytest.raises(ValueError, match="weights"):
        mean(torch.zeros(2, 3), torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="updates"):
        mean(torch.zeros(3))
    with pytest.raises(ValueError, match="server_update"):
        fltrust(torch.zeros(2, 3), server_update=torch.zeros(2))
