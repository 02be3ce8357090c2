"""Synthetic document-length distributions for packing tests and benchmarks.

Real pretraining corpora (web text, code) have heavy-tailed document lengths: many short
documents and a tail longer than a 2k context. A log-normal with median 450 and mean 825 tokens
reproduces that shape; at L = 2048 about 8.4% of its documents are longer than L.
"""

from __future__ import annotations

import math

import numpy as np


def lognormal_document_lengths(
    n_documents: int, rng: np.random.Generator, median: float = 450.0, mean: float = 825.0
) -> np.ndarray:
    """Draw `n_documents` integer lengths (>= 1) from a log-normal with the given median and mean.

    For a log-normal, median = exp(mu) and mean = exp(mu + sigma^2 / 2), so
    mu = ln(median) and sigma = sqrt(2 ln(mean / median)).
    """
    if not mean > median > 0:
        raise ValueError("a log-normal needs mean > median > 0")
    mu = math.log(median)
    sigma = math.sqrt(2.0 * math.log(mean / median))
    lengths = np.ceil(rng.lognormal(mu, sigma, size=n_documents))
    return lengths.astype(np.int64)
