"""Per-sample clipped gradients of the node models, against opacus as the independent reference."""

import pytest
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer

from testbed.decentralized.models import FlatModel, ModelSpec

# opacus hooks warn that the inputs need no gradient; irrelevant for per-sample gradients.
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")


def _module_with(spec: ModelSpec, flat: torch.Tensor) -> torch.nn.Module:
    module = spec.module()
    with torch.no_grad():
        for parameter, value in zip(module.parameters(), spec.unflatten(flat).values()):
            parameter.copy_(value)
    return module


def _batch(spec: ModelSpec, size: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    flat = 0.3 * torch.randn(spec.num_params, generator=generator)
    x = torch.randn(size, spec.in_features, generator=generator)
    y = torch.randint(0, spec.num_classes, (size,), generator=generator)
    return flat, x, y


@pytest.mark.parametrize("arch", ["logreg", "mlp"])
def test_per_sample_gradients_match_opacus_grad_sample_module(arch):
    # Prepare: the same parameters in a torch module wrapped by opacus
    spec = ModelSpec(arch, in_features=7, num_classes=3, hidden=5)
    flat, x, y = _batch(spec, 9, seed=1)
    module = GradSampleModule(_module_with(spec, flat), loss_reduction="sum")

    # Execute
    torch.nn.functional.cross_entropy(module(x), y, reduction="sum").backward()
    ours = FlatModel(spec).per_sample_gradients(flat, x, y)

    # Assert
    reference = torch.cat([p.grad_sample.reshape(9, -1) for p in module.parameters()], dim=1)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["logreg", "mlp"])
def test_clipped_mean_matches_opacus_dp_optimizer_without_noise(arch):
    # Prepare: opacus clips per sample and averages over the expected batch size
    spec = ModelSpec(arch, in_features=6, num_classes=4, hidden=8)
    flat, x, y = _batch(spec, 12, seed=2)
    module = GradSampleModule(_module_with(spec, 3.0 * flat), loss_reduction="mean")
    optimizer = DPOptimizer(torch.optim.SGD(module.parameters(), lr=0.1), noise_multiplier=0.0,
                            max_grad_norm=0.5, expected_batch_size=12)

    # Execute
    torch.nn.functional.cross_entropy(module(x), y).backward()
    optimizer.pre_step()
    ours = FlatModel(spec).clipped_mean_gradient(3.0 * flat, x, y, torch.ones(12), clip=0.5)

    # Assert
    reference = torch.cat([p.grad.reshape(-1) for p in module.parameters()])
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-7)


def test_clipped_mean_is_bounded_masked_and_vectorised_over_nodes():
    spec = ModelSpec("mlp", in_features=5, num_classes=3, hidden=4)
    model = FlatModel(spec)
    flat, x, y = _batch(spec, 6, seed=3)
    params = torch.stack([flat, 5 * flat])
    mask = torch.tensor([[1.0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])

    block = model.clipped_mean_gradient(params, torch.stack([x, x]), torch.stack([y, y]), mask, clip=0.1)

    assert block.norm(dim=1).max() <= 0.1 + 1e-6
    torch.testing.assert_close(block[0], model.clipped_mean_gradient(flat, x[:3], y[:3], torch.ones(3), 0.1))
    torch.testing.assert_close(block[1], model.clipped_mean_gradient(5 * flat, x, y, torch.ones(6), 0.1))
    empty = model.clipped_mean_gradient(flat, x, y, torch.zeros(6), 0.1)
    assert torch.count_nonzero(empty) == 0  # a node without samples contributes nothing
