"""The DFM sequence task: non-decreasing token sequences, with a validity rule and an exact denoiser.

Data are drawn uniformly from all non-decreasing sequences of ``length`` tokens over a
``vocab``-sized alphabet (``vocab = 2`` is the "ones then zeros" toy of the authors' notebooks,
reversed). A sample is *valid* when it is non-decreasing. Because the valid set is small, the
exact denoiser ``p(x_1 | x_t)`` is available: the uniform distribution over the valid sequences that
agree with the unmasked tokens. It lets the eta-invariance of the sampler be checked without the
error of a learned network.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from scipy.stats import chi2_contingency

# The size of the valid set is defined with the config, whose check needs it without torch.
from testbed.workloads.dfm.config import valid_count as valid_count


def valid_sequences(vocab: int, length: int) -> torch.Tensor:
    """All non-decreasing sequences, shape ``[valid_count, length]``."""
    return torch.tensor(list(itertools.combinations_with_replacement(range(vocab), length)), dtype=torch.long)


def sample_data(valid: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` sequences drawn uniformly from the valid set."""
    return valid[torch.randint(0, len(valid), (count,), generator=generator)]


def is_valid(x: torch.Tensor) -> torch.Tensor:
    """Whether each sequence is non-decreasing."""
    return (x[:, 1:] >= x[:, :-1]).all(dim=1)


class ExactDenoiser:
    """``p(x_1 | x_t)`` of the data distribution: uniform over the valid sequences consistent with ``x_t``."""

    def __init__(self, valid: torch.Tensor, vocab: int, mask_id: int):
        self.vocab, self.mask_id = vocab, mask_id
        self.one_hot = torch.nn.functional.one_hot(valid, vocab).float()  # [V, D, S]

    def __call__(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        del t  # masking does not depend on token values, so the posterior does not depend on t
        unmasked = x_t != self.mask_id
        observed = torch.nn.functional.one_hot(torch.where(unmasked, x_t, 0), self.vocab).float()
        observed = observed * unmasked[..., None]
        matches = observed.flatten(1) @ self.one_hot.flatten(1).T  # [n, V]: agreeing unmasked tokens
        weights = (matches == unmasked.sum(1, keepdim=True)).float()
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1.0)
        return torch.einsum("nv,vds->nds", weights, self.one_hot).clamp(min=1e-12)


def statistic_table(x: torch.Tensor, vocab: int) -> np.ndarray:
    """Counts of (valid?, token sum): a summary of a sample set's distribution, shape ``[2, bins]``."""
    bins = (vocab - 1) * x.shape[1] + 1
    table = np.zeros((2, bins), dtype=np.int64)
    np.add.at(table, (is_valid(x).long().numpy(), x.sum(1).numpy()), 1)
    return table


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    """TV distance between the normalised count tables of two sample sets."""
    return float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())


def same_distribution_pvalue(a: np.ndarray, b: np.ndarray, pool_below: int = 10) -> float:
    """Chi-square test p-value that two count tables come from one distribution.

    Cells with fewer than ``pool_below`` samples in total are pooled into one cell, so that the
    chi-square approximation holds.
    """
    counts = np.stack([a.ravel(), b.ravel()])
    sparse = counts.sum(0) < pool_below
    counts = np.concatenate([counts[:, ~sparse], counts[:, sparse].sum(1, keepdims=True)], axis=1)
    counts = counts[:, counts.sum(0) > 0]
    return float(chi2_contingency(counts)[1]) if counts.shape[1] > 1 else 1.0
