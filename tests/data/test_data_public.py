"""The unlabelled public set (crops of scikit-learn's photographs, noise) and SDEA's weak augmentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from testbed.data.public import (
    PUBLIC_SETS,
    PublicDataConfig,
    augment_views,
    noise_images,
    public_images,
    sample_image_crops,
)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_photo_crops_have_the_target_shape_and_range():
    rng = np.random.default_rng(0)

    gray = sample_image_crops(64, (1, 8, 8), rng)
    color = sample_image_crops(8, (3, 12, 16), rng)

    assert gray.shape == (64, 1, 8, 8) and gray.dtype == np.float32
    assert color.shape == (8, 3, 12, 16) and color.dtype == np.float32
    assert 0.0 <= min(gray.min(), color.min()) and max(gray.max(), color.max()) <= 1.0


def test_photo_crops_are_deterministic_for_a_seed_and_varied():
    first = sample_image_crops(64, (1, 8, 8), np.random.default_rng(1))
    again = sample_image_crops(64, (1, 8, 8), np.random.default_rng(1))
    other = sample_image_crops(64, (1, 8, 8), np.random.default_rng(2))

    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert first.reshape(64, -1).mean(axis=1).std() > 0.05  # crops differ in brightness
    assert first.reshape(64, -1).std(axis=1).mean() > 0.01  # and carry structure inside
    assert len(np.unique(first.reshape(64, -1), axis=0)) == 64


def test_a_missing_rng_is_an_error_not_a_hidden_fixed_seed():
    with pytest.raises(TypeError, match="rng is required"):
        sample_image_crops(4)


def test_noise_images_are_uniform_in_the_unit_interval_and_seeded():
    noise = noise_images(200, (1, 8, 8), np.random.default_rng(3))

    assert noise.shape == (200, 1, 8, 8) and noise.dtype == np.float32
    assert 0.0 <= noise.min() and noise.max() < 1.0 and abs(float(noise.mean()) - 0.5) < 0.02
    assert np.array_equal(noise, noise_images(200, (1, 8, 8), np.random.default_rng(3)))


def test_public_config_selects_a_registered_source():
    config = PublicDataConfig(source="noise", size=10)

    images = public_images(config, (1, 8, 8), np.random.default_rng(0))

    assert set(PUBLIC_SETS) == {"sample_images", "noise"} and PublicDataConfig().source == "sample_images"
    assert images.shape == (10, 1, 8, 8)
    for bad in ({"size": 0}, {"source": "imagenet"}, {"sizes": 3}):
        with pytest.raises(ValidationError):
            PublicDataConfig(**bad)


def test_augment_views_are_deterministic_per_generator_and_change_the_images():
    x = torch.from_numpy(sample_image_crops(32, (1, 8, 8), np.random.default_rng(4)))

    view = augment_views(x, generator(0))
    same = augment_views(x, generator(0))
    shared = generator(1)
    view_a, view_b = augment_views(x, shared), augment_views(x, shared)

    assert view.shape == x.shape and view.dtype == x.dtype
    assert torch.equal(view, same)
    assert not torch.allclose(view_a, view_b)  # SDEA's two views differ
    assert (view - x).abs().mean() > 0.01
    assert x.min() <= view.min() and view.max() <= x.max()  # bilinear resampling stays in range


def test_augment_flip_mirrors_the_same_crop():
    x = torch.rand(16, 1, 8, 8, generator=generator(5))

    unflipped = augment_views(x, generator(6), flip_probability=0.0)
    flipped = augment_views(x, generator(6), flip_probability=1.0)

    assert torch.allclose(flipped, torch.flip(unflipped, dims=[-1]), atol=1e-6)
    assert not torch.allclose(flipped, unflipped)


def test_augment_rejects_unbatched_input():
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        augment_views(torch.rand(1, 8, 8), generator(0))
