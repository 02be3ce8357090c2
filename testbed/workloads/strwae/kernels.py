"""Kernel penalties of the WAE framework: MMD between distributions, (d-variable) HSIC for independence.

* ``mmd``: the unbiased estimate of MMD^2 (Gretton et al. 2012) with the inverse multiquadratic
  kernel ``C / (C + ||a - b||^2)`` summed over scales, as WAE-MMD uses (Tolstikhin et al. 2018).
  WAE penalises ``MMD(Q_Z, P_Z)`` to make the encoder's aggregate posterior match the prior.
* ``hsic``: the unbiased estimate of the Hilbert-Schmidt independence criterion (Gretton et al.
  2005; Song et al. 2012), zero in expectation iff two variables are independent (characteristic
  kernels), and ``mutual_independence``, its chain over several variables (the role dHSIC plays
  in the paper). StrWAE turns the independence that the decoder's structure requires of its
  inputs into such penalties.
"""

from __future__ import annotations

from typing import cast

import torch

IMQ_SCALES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``||a_i - b_j||^2`` for all pairs, clamped at zero against round-off."""
    return (a.pow(2).sum(1)[:, None] + b.pow(2).sum(1)[None, :] - 2 * a @ b.T).clamp_min(0)


def imq_kernel(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """Inverse multiquadratic kernels summed over ``IMQ_SCALES`` (base ``C = scale``)."""
    distances = squared_distances(a, b)
    return cast(torch.Tensor, sum(scale * s / (scale * s + distances) for s in IMQ_SCALES))  # a sum of tensors


def mmd(sample: torch.Tensor, reference: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Unbiased MMD^2 between two samples (rows); ``scale`` defaults to ``2 * dim`` (for N(0, I))."""
    scale = 2.0 * sample.shape[1] if scale is None else scale
    n, m = len(sample), len(reference)
    k_ss, k_rr, k_sr = (imq_kernel(sample, sample, scale), imq_kernel(reference, reference, scale),
                        imq_kernel(sample, reference, scale))
    within_s = (k_ss.sum() - k_ss.diagonal().sum()) / (n * (n - 1))
    within_r = (k_rr.sum() - k_rr.diagonal().sum()) / (m * (m - 1))
    return within_s + within_r - 2 * k_sr.mean()


def gaussian_gram(values: torch.Tensor) -> torch.Tensor:
    """Gaussian kernel matrix with the median heuristic bandwidth (the bandwidth is not differentiated)."""
    distances = squared_distances(values, values)
    bandwidth = distances.detach()[distances.detach() > 0].median() if (distances > 0).any() else torch.tensor(1.0)
    return torch.exp(-distances / bandwidth)


def category_gram(labels: torch.Tensor) -> torch.Tensor:
    """Delta kernel ``1[a = b]`` of a discrete variable (characteristic on a finite set)."""
    return (labels[:, None] == labels[None, :]).to(torch.get_default_dtype())


def soft_category_gram(probabilities: torch.Tensor) -> torch.Tensor:
    """``<p_a, p_b>`` for probability vectors: the delta kernel when they are one-hot, differentiable between."""
    return probabilities @ probabilities.T


def hsic(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Unbiased HSIC estimate of two Gram matrices (Song et al. 2012); its mean is 0 under independence.

    ``[tr(K~L~) + 1'K~1 1'L~1 / ((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3))`` with ``K~``, ``L~`` the
    Gram matrices with zeroed diagonals. The biased V-statistic is positive even for independent
    variables, by an amount that shrinks when a variable collapses, so as a penalty it would push
    the representation to a point; the unbiased one does not.
    """
    n = first.shape[0]
    k_tilde = first - torch.diag_embed(first.diagonal())
    l_tilde = second - torch.diag_embed(second.diagonal())
    trace = (k_tilde * l_tilde).sum()
    totals = k_tilde.sum() * l_tilde.sum() / ((n - 1) * (n - 2))
    cross = 2.0 / (n - 2) * (k_tilde.sum(dim=0) * l_tilde.sum(dim=1)).sum()
    return (trace + totals - cross) / (n * (n - 3))


def mutual_independence(grams: list[torch.Tensor]) -> torch.Tensor:
    """``sum_i HSIC(V_i, (V_{i+1}, ..., V_d))``: zero iff the variables are mutually independent.

    Mutual independence of ``V_1..V_d`` holds iff each ``V_i`` is independent of the tuple after
    it. The tuple's kernel is ``prod_j (1 + K_j) - 1``, characteristic when its factors are; as
    HSIC is linear in a kernel, it contains each ``HSIC(V_i, V_j)`` with its full weight (a bare
    product ``prod_j K_j`` would see only the interaction and lose most of the pairwise signal).
    """
    total = torch.zeros(())
    for index in range(len(grams) - 1):
        rest = torch.stack([1 + gram for gram in grams[index + 1 :]]).prod(dim=0) - 1
        total = total + hsic(grams[index], rest)
    return total
