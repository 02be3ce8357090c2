"""The unlabelled public set (crops of scikit-learn's photographs, typeset characters, noise) and
SDEA's weak augmentation."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from testbed.data.glyphs import CHARACTERS, HELD_OUT_FONTS, draw_distortions, render
from testbed.data.public import (
    PUBLIC_LIMITS,
    PUBLIC_SETS,
    TYPESET_POOL,
    PublicDataConfig,
    augment_views,
    largest_public_size,
    noise_images,
    public_images,
    sample_image_crops,
    typeset_images,
    typeset_items,
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

    assert set(PUBLIC_SETS) == {"sample_images", "noise", "typeset"} and PublicDataConfig().source == "sample_images"
    assert set(PUBLIC_SETS) == set(PUBLIC_LIMITS) == set(get_args(PublicDataConfig.model_fields["source"].annotation))
    assert images.shape == (10, 1, 8, 8)
    for bad in ({"size": 0}, {"source": "imagenet"}, {"sizes": 3}):
        with pytest.raises(ValidationError):
            PublicDataConfig(**bad)


def test_typeset_public_images_at_8x8_are_on_the_optdigits_grid_like_the_clients_digits():
    from sklearn.datasets import load_digits

    images = typeset_images(300, (1, 8, 8), np.random.default_rng(0))
    digits = load_digits().images / 16.0

    assert images.shape == (300, 1, 8, 8) and images.dtype == np.float32
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert np.array_equal(images * 16, np.round(images * 16)) and len(np.unique(images)) == 17  # k/16, all of them
    assert abs(float(images.mean()) - float(digits.mean())) < 0.1  # about as much ink as scikit-learn's digits
    assert len(np.unique(images.reshape(300, -1), axis=0)) == 300


def test_typeset_draws_distinct_computer_modern_items_and_renders_exactly_those():
    items = typeset_items(TYPESET_POOL, np.random.default_rng(1))
    images = typeset_images(12, (1, 28, 28), np.random.default_rng(2))
    rng = np.random.default_rng(2)  # replayed: the items first, then one distortion each
    drawn = typeset_items(12, rng)

    assert TYPESET_POOL == 4320 and len(set(items)) == TYPESET_POOL  # the whole pool, no item twice
    assert {font for font, _, _ in items} == set(HELD_OUT_FONTS) and all(f.startswith("cm") for f in HELD_OUT_FONTS)
    assert {character for _, character, _ in items} == set(CHARACTERS)
    for image, (font, character, _), distortion in zip(images, drawn, draw_distortions(12, rng)):
        assert np.array_equal(image[0], render(font, character, 28, 28, distortion))


def test_typeset_public_images_at_other_shapes_are_rendered_there_and_seeded():
    color = typeset_images(6, (3, 12, 16), np.random.default_rng(3))
    gray = typeset_images(6, (1, 12, 16), np.random.default_rng(3))

    assert color.shape == (6, 3, 12, 16) and np.array_equal(color, np.repeat(gray, 3, axis=1))
    assert 0.0 <= gray.min() and gray.max() <= 1.0 and gray.max() > 0.9
    assert np.array_equal(gray, typeset_images(6, (1, 12, 16), np.random.default_rng(3)))
    assert not np.array_equal(gray, typeset_images(6, (1, 12, 16), np.random.default_rng(4)))


def test_variants_of_one_typeset_glyph_are_differently_distorted():
    images = typeset_images(300, (1, 20, 20), np.random.default_rng(5))[:, 0]
    items = typeset_items(300, np.random.default_rng(5))
    twins = [(i, j) for i in range(300) for j in range(i + 1, 300) if items[i][:2] == items[j][:2]]

    assert len(twins) > 50  # 300 of 180 (font, character) pairs
    assert min(np.abs(images[i] - images[j]).mean() for i, j in twins) > 0.01


def test_the_typeset_source_is_finite_and_says_its_largest_size():
    assert largest_public_size("typeset") == TYPESET_POOL
    assert largest_public_size("sample_images") is None and largest_public_size("noise") is None
    with pytest.raises(ValueError, match=f"size: {TYPESET_POOL + 1} is more than the {TYPESET_POOL}"):
        typeset_images(TYPESET_POOL + 1, (1, 8, 8), np.random.default_rng(0))
    with pytest.raises(ValueError, match="valid: noise, sample_images, typeset"):
        largest_public_size("imagenet")


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
