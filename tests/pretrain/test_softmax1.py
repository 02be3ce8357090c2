"""Tests for Softmax_1, OutEffHop Hopfield retrieval and attention with a document mask."""

from __future__ import annotations

import math

import pytest
import torch

from testbed.pretrain.attention import (
    attention,
    clipped_softmax,
    document_causal_mask,
    hopfield_retrieve,
    outeffhop_energy,
    softmax_1,
)


def softmax_with_zero_logit(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Reference: softmax over x with one zero logit appended along `dim`, that entry dropped."""
    zero = torch.zeros_like(x.narrow(dim, 0, 1))
    return torch.softmax(torch.cat([x, zero], dim=dim), dim=dim).narrow(dim, 0, x.shape[dim])


def well_separated_patterns(n_patterns: int = 8, dim: int = 64) -> torch.Tensor:
    """Unit-norm random patterns: in 64 dimensions their overlaps are small (about 0.1-0.4)."""
    patterns = torch.randn(n_patterns, dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return patterns / patterns.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("dim", [-1, 1])
def test_softmax_1_equals_softmax_with_an_appended_zero_logit(dim: int) -> None:
    # Prepare
    x = 3.0 * torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    # Execute
    result = softmax_1(x, dim=dim)
    # Assert
    torch.testing.assert_close(result, softmax_with_zero_logit(x, dim), rtol=1e-12, atol=1e-15)
    assert torch.all(result.sum(dim=dim) < 1.0)


def test_softmax_1_is_stable_for_large_logits() -> None:
    # Prepare: float32 would overflow exp(1000) without the shift.
    x = torch.tensor([[1000.0, 999.0, -1000.0], [-1000.0, -1000.0, -1000.0]])
    # Execute
    result = softmax_1(x)
    # Assert
    expected_first = torch.tensor([1.0, math.exp(-1.0), 0.0]) / (1.0 + math.exp(-1.0))
    assert torch.isfinite(result).all()
    torch.testing.assert_close(result[0], expected_first)
    torch.testing.assert_close(result[1], torch.zeros(3))


def test_softmax_1_gradient_passes_gradcheck() -> None:
    # Prepare: float64, logits on both sides of 0 and one large logit (m > 0 branch).
    x = torch.randn(2, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x[1, 0] = 40.0
    x.requires_grad_(True)
    # Execute / Assert
    assert torch.autograd.gradcheck(softmax_1, (x,), eps=1e-6, atol=1e-8)


def test_softmax_1_lets_a_head_attend_to_nothing_while_softmax_cannot() -> None:
    # Prepare: every logit very negative, i.e. no key is relevant.
    logits = torch.full((4, 10), -30.0, dtype=torch.float64)
    # Execute
    quiet = softmax_1(logits).sum(dim=-1)
    forced = torch.softmax(logits, dim=-1).sum(dim=-1)
    # Assert
    assert torch.all(quiet < 1e-11)
    torch.testing.assert_close(forced, torch.ones(4, dtype=torch.float64))


def test_fully_masked_softmax_1_attention_outputs_zero_not_nan() -> None:
    # Prepare
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 4, 8, generator=generator) for _ in range(3))
    mask = torch.zeros(4, 4, dtype=torch.bool)
    # Execute
    output = attention(q, k, v, mask=mask, kind="softmax_1")
    # Assert
    torch.testing.assert_close(output, torch.zeros_like(output))


def test_document_mask_makes_packed_attention_equal_per_document_attention() -> None:
    # Prepare: documents of 3 and 2 tokens packed into 6 positions, the last one padding.
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(6, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    mask = document_causal_mask(torch.tensor([0, 0, 0, 7, 7, -1]))
    causal = lambda n: torch.ones(n, n, dtype=torch.bool).tril()
    # Execute
    packed = attention(q, k, v, mask=mask, kind="softmax_1")
    first = attention(q[:3], k[:3], v[:3], mask=causal(3), kind="softmax_1")
    second = attention(q[3:5], k[3:5], v[3:5], mask=causal(2), kind="softmax_1")
    # Assert
    torch.testing.assert_close(packed[:5], torch.cat([first, second]))
    assert mask[5].tolist() == [False] * 5 + [True]


def test_clipped_softmax_reaches_exact_zero_and_exact_one() -> None:
    """Catches a clipped softmax without the (zeta - gamma) stretch, with gamma's sign flipped or without the clip
    (the old test also checked torch.softmax itself): the values are hand-computed from e^5, 1, e^-5."""
    # Prepare: softmax([5, 0, -5]) = (e^5, 1, e^-5) / (e^5 + 1 + e^-5) = (0.99326, 0.00669, 0.0000454).
    x = torch.tensor([5.0, 0.0, -5.0], dtype=torch.float64)
    total = math.exp(5) + 1 + math.exp(-5)
    # Execute
    clipped = clipped_softmax(x, gamma=-0.025, zeta=1.0)
    stretched = clipped_softmax(x, gamma=-0.025, zeta=1.1)
    # Assert: the two small weights fall below 0.025 / 1.025 and clip to exactly 0; zeta = 1.1 clips the first to 1.
    torch.testing.assert_close(clipped, torch.tensor([1.025 * math.exp(5) / total - 0.025, 0.0, 0.0],
                                                     dtype=torch.float64))
    assert clipped[1] == 0.0 and clipped[2] == 0.0 and stretched[0] == 1.0
    torch.testing.assert_close(stretched[1:], torch.zeros(2, dtype=torch.float64))


def test_hopfield_retrieval_converges_to_the_stored_pattern() -> None:
    # Prepare: a noisy copy of pattern 3, large beta.
    patterns = well_separated_patterns()
    noise = torch.randn(64, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    query = patterns[3] + 0.2 * noise / noise.norm()
    # Execute
    retrieved = hopfield_retrieve(query, patterns, beta=60.0, steps=3)
    one_more_step = hopfield_retrieve(retrieved, patterns, beta=60.0, steps=1)
    # Assert: the stored pattern is reached and is a fixed point of the update.
    torch.testing.assert_close(retrieved, patterns[3], rtol=0, atol=1e-9)
    torch.testing.assert_close(one_more_step, retrieved, rtol=0, atol=1e-12)


def test_retrieval_of_an_unrelated_state_is_a_no_op_only_with_softmax_1() -> None:
    # Prepare: a state anti-aligned with every pattern, so all similarities are negative.
    patterns = well_separated_patterns()
    query = -patterns.sum(dim=0)
    # Execute
    quiet = hopfield_retrieve(query, patterns, beta=60.0, steps=1)
    forced = hopfield_retrieve(query, patterns, beta=60.0, steps=1, normalizer=torch.softmax)
    # Assert: Softmax_1 retrieves (almost) nothing; softmax must return some mixture.
    assert quiet.norm() < 1e-9
    assert forced.norm() > 0.3


def test_outeffhop_energy_never_increases_along_retrieval() -> None:
    # Prepare
    patterns = well_separated_patterns()
    state = torch.randn(5, 64, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 0.3
    energies = [outeffhop_energy(state, patterns, beta=4.0)]
    # Execute
    for _ in range(10):
        state = hopfield_retrieve(state, patterns, beta=4.0, steps=1)
        energies.append(outeffhop_energy(state, patterns, beta=4.0))
    # Assert
    steps = torch.stack(energies).diff(dim=0)
    assert torch.all(steps <= 1e-12)
    assert steps[0].min() < 0  # it actually moves
