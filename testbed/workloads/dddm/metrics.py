"""Data and sample-quality measures of the DDDM workload.

* ``gaussians``: eight Gaussians (std 0.1) on a circle of radius 2. Quality: MMD with an RBF
  kernel (bandwidths 0.1, 0.3, 1) to held-out points, and the share of samples within 3 std of a
  mode.
* ``digits``: scikit-learn's 8x8 digits scaled to [-1, 1]. Quality: an FID-like Frechet distance
  between Gaussians fitted to the penultimate features of a small digits classifier, trained once
  from the run's seed. The same features give the Pseudo-LPIPS-style metric
  ``sqrt(LPIPS_phi(a, b) + c^2) - c``, with ``LPIPS_phi`` the mean squared distance of unit-normalised
  hidden activations (the pretrained VGG/AlexNet of LPIPS is not available offline).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
from torch import nn

from testbed.data import load_dataset
from testbed.workloads.training import optimizer_step

CENTRES = 2.0 * torch.tensor([[math.cos(k * math.pi / 4), math.sin(k * math.pi / 4)] for k in range(8)])
MODE_STD = 0.1


def eight_gaussians(count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` draws of the eight-Gaussian mixture."""
    modes = torch.randint(0, 8, (count,), generator=generator)
    return CENTRES[modes] + MODE_STD * torch.randn(count, 2, generator=generator)


def digits(test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Digits scaled to [-1, 1]: (train images, test images, train labels)."""
    data = load_dataset("digits")
    x = torch.from_numpy(data.x.reshape(len(data.y), -1)).float()
    x = 2 * (x - x.min()) / (x.max() - x.min()) - 1
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(round(len(x) * (1 - test_fraction)))
    return x[order[:cut]], x[order[cut:]], torch.from_numpy(data.y)[order[:cut]].long()


def mmd(a: torch.Tensor, b: torch.Tensor, bandwidths: tuple[float, ...] = (0.1, 0.3, 1.0)) -> float:
    """Squared maximum mean discrepancy (biased estimate) with a sum of RBF kernels."""
    def kernel(x, y):
        distances = torch.cdist(x, y) ** 2
        return sum(torch.exp(-distances / (2 * h * h)) for h in bandwidths)
    return float(kernel(a, a).mean() + kernel(b, b).mean() - 2 * kernel(a, b).mean())


def mode_fraction(samples: torch.Tensor) -> float:
    """Share of samples within three standard deviations of one of the eight modes."""
    return float((torch.cdist(samples, CENTRES).min(1).values < 3 * MODE_STD).float().mean())


class DigitFeatures(nn.Module):
    """A small digits classifier whose hidden activations serve as features (FID-like and Pseudo-LPIPS)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Sequential(nn.Linear(64, 128), nn.SiLU())
        self.second = nn.Sequential(nn.Linear(128, 64), nn.SiLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.second(self.first(x)))

    def layers(self, x: torch.Tensor) -> list[torch.Tensor]:
        first = self.first(x)
        return [first, self.second(first)]

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate activations: the space of the Frechet distance."""
        return self.layers(x)[1]


def train_features(images: torch.Tensor, labels: torch.Tensor, seed: int, steps: int = 400) -> DigitFeatures:
    """Fit the feature classifier on the training digits (Adam, full batches); frozen afterwards."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DigitFeatures()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        optimizer_step(optimizer, nn.functional.cross_entropy(model(images), labels))
    return model.requires_grad_(False).eval()


def pseudo_lpips(features: DigitFeatures, c: float):
    """The Pseudo-LPIPS-style metric ``sqrt(LPIPS_phi(a, b) + c^2) - c`` (per sample)."""
    def metric(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        lpips = cast(torch.Tensor, sum(  # a sum of tensors
            ((nn.functional.normalize(fa, dim=1) - nn.functional.normalize(fb, dim=1)) ** 2).sum(1)
            for fa, fb in zip(features.layers(a), features.layers(b)))) / 2
        return (lpips + c * c).sqrt() - c
    return metric


def frechet_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Frechet distance between Gaussians fitted to two feature sets (the FID formula).

    ``tr sqrt(C_a C_b)`` is computed as ``tr sqrt(C_a^1/2 C_b C_a^1/2)`` from symmetric
    eigendecompositions, which stays defined when a covariance is singular (collapsed samples).
    """
    a_np, b_np = a.double().numpy(), b.double().numpy()
    mean_a, mean_b = a_np.mean(0), b_np.mean(0)
    cov_a, cov_b = np.cov(a_np, rowvar=False), np.cov(b_np, rowvar=False)
    values, vectors = np.linalg.eigh(cov_a)
    root_a = (vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T
    cross = np.sqrt(np.clip(np.linalg.eigvalsh(root_a @ cov_b @ root_a), 0, None)).sum()
    return float(((mean_a - mean_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2 * cross)
