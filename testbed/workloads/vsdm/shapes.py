"""Anisotropic 2-D data for VSDM and the sample-quality metrics it is judged by.

The shapes follow the VSDM toy experiments: a two-armed spiral stretched along y and a
checkerboard stretched along x, so that a diffusion with an isotropic forward process at a small
noise schedule does not reach its Gaussian prior along the stretched axis.
"""

from __future__ import annotations

import numpy as np
import torch

STRETCHED_AXIS = {"spiral": 1, "checkerboard": 0}


def base_shape(shape: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` points of the unstretched shape, standardised to zero mean and unit std per axis."""
    if shape == "spiral":
        angle = np.sqrt(rng.random(count)) * 3 * np.pi  # 540 degrees, denser towards the centre
        arm = np.where(rng.random(count) < 0.5, 1.0, -1.0)
        points = np.stack([-np.cos(angle) * angle, np.sin(angle) * angle], axis=1) * arm[:, None]
        points += 0.3 * rng.standard_normal((count, 2))
    elif shape == "checkerboard":
        x = rng.uniform(-2, 2, count)
        y = rng.uniform(0, 1, count) - 2 * rng.integers(0, 2, count) + np.floor(x) % 2
        points = np.stack([x, y], axis=1)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return (points - points.mean(0)) / points.std(0)


def make_shape(shape: str, stretch: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """The anisotropic data set: ``base_shape`` with its stretched axis multiplied by ``stretch``."""
    points = base_shape(shape, count, rng)
    points[:, STRETCHED_AXIS[shape]] *= stretch
    return points.astype(np.float32)


def sliced_wasserstein(a: torch.Tensor, b: torch.Tensor, projections: int = 128, seed: int = 0) -> float:
    """Sliced 1-Wasserstein distance between two equal-sized point clouds (random directions, fixed seed)."""
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(a.shape[1], projections, generator=generator)
    directions /= directions.norm(dim=0, keepdim=True)
    projected_a, _ = torch.sort(a @ directions, dim=0)
    projected_b, _ = torch.sort(b @ directions, dim=0)
    return float((projected_a - projected_b).abs().mean())


def pmf_rmse(a: np.ndarray, b: np.ndarray, bins: int = 40, span: float = 3.5) -> float:
    """RMSE between the normalised 2-D histograms of two standardised point clouds (the VSDM repo's metric)."""
    edges = np.linspace(-span, span, bins + 1)
    hist_a, _, _ = np.histogram2d(a[:, 0], a[:, 1], bins=[edges, edges])
    hist_b, _, _ = np.histogram2d(b[:, 0], b[:, 1], bins=[edges, edges])
    return float(np.sqrt(np.mean((hist_a / len(a) - hist_b / len(b)) ** 2)))


def straightness(paths: torch.Tensor) -> float:
    """``E[sum_k |x_{k+1} - x_k|] / E[|x_K - x_0|]`` over paths ``[K+1, n, d]``; 1 means straight lines."""
    length = (paths[1:] - paths[:-1]).norm(dim=-1).sum(0)
    displacement = (paths[-1] - paths[0]).norm(dim=-1)
    return float(length.mean() / displacement.mean())


def gaussian_kl(mean_p: torch.Tensor, cov_p: torch.Tensor, cov_q: torch.Tensor) -> float:
    """``KL(N(mean_p, cov_p) || N(0, cov_q))``: how far the forward terminal marginal is from the prior."""
    d = cov_p.shape[0]
    q_inv = torch.linalg.inv(cov_q)
    trace = torch.trace(q_inv @ cov_p)
    quadratic = mean_p @ q_inv @ mean_p
    log_det = torch.logdet(cov_q) - torch.logdet(cov_p)
    return float(0.5 * (trace + quadratic - d + log_det))
