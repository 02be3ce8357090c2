"""Unlabelled public data for server-side methods (SDEA), and the weak augmentation they use.

SDEA's server holds a small unlabelled set from another domain than the clients' data and compares
client models on two augmented views of it. Offline, the other domain is the two photographs bundled
with scikit-learn (china.jpg and flower.jpg): `sample_image_crops` takes random crops of random size,
downscales them with an antialiasing filter to the clients' image shape and scales them to [0, 1].
`typeset_images` is a *related* domain for the character sets (``digits``, ``glyphs``): digits and
uppercase letters in the five Computer Modern fonts, which ``glyphs`` leaves out, distorted like it
(`testbed.data.glyphs`); it is finite, so `largest_public_size` says how many a source can give.
`noise_images` (uniform noise) is the domain-free alternative. Usage::

    public = public_images(PublicDataConfig(size=512), (1, 8, 8), seeds.numpy("public"))
    view_a = augment_views(torch.from_numpy(public), generator)
    view_b = augment_views(torch.from_numpy(public), generator)  # a second, different view
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from testbed.data.config import PublicDataConfig
from testbed.data.glyphs import CHARACTERS, HELD_OUT_FONTS, draw_distortions, optdigits_8x8, render

if TYPE_CHECKING:  # the sizes and checks here import no torch (validation reads them); the augmentation does
    import torch

# Side lengths of the square crops, in photo pixels (the photos are 427 x 640): small crops give
# texture, large ones give shapes, so the set covers several scales.
CROP_SIDES = (16, 128)


def _check_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) != 3 or shape[0] not in (1, 3) or min(shape) < 1:
        raise ValueError(f"shape must be (channels, height, width) with 1 or 3 channels, got {shape}")
    return int(shape[0]), int(shape[1]), int(shape[2])


def _require_rng(rng: np.random.Generator | None) -> np.random.Generator:
    # rng is required, but keeps a default so that `f(size, shape, rng)` and `f(size, rng=rng)` both
    # work; a silent fixed seed would hide a run's root seed, so None is an error.
    if rng is None:
        raise TypeError("rng is required: pass a numpy Generator drawn from the run's seed tree, "
                        "e.g. setup.seeds.numpy('sdea.public')")
    return rng


@lru_cache(maxsize=2)
def _sample_photos(channels: int) -> tuple[Image.Image, ...]:
    """scikit-learn's two bundled photographs, grayscale for one channel, RGB for three."""
    from sklearn.datasets import load_sample_images  # imported here: only SDEA runs need it

    mode = "L" if channels == 1 else "RGB"
    return tuple(Image.fromarray(photo).convert(mode) for photo in load_sample_images().images)


def _crop(photo: Image.Image, side: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    crop_w = min(side, photo.width)
    crop_h = min(max(1, round(side * height / width)), photo.height)  # keep the target's aspect ratio
    left = int(rng.integers(0, photo.width - crop_w + 1))
    top = int(rng.integers(0, photo.height - crop_h + 1))
    # LANCZOS in PIL widens its kernel with the scale factor, so the downscale is antialiased.
    small = photo.resize((width, height), Image.Resampling.LANCZOS, box=(left, top, left + crop_w, top + crop_h))
    return np.asarray(small, dtype=np.float32) / np.float32(255)


def sample_image_crops(size: int, shape: tuple[int, ...] = (1, 8, 8),
                       rng: np.random.Generator | None = None) -> np.ndarray:
    """``size`` random crops of scikit-learn's sample photographs, float32 [size, C, H, W] in [0, 1].

    Each crop has a random side of 16..128 px and a random position in a random photo, and is
    downscaled to ``shape`` (grayscale for one channel, RGB for three).
    """
    channels, height, width = _check_shape(shape)
    rng = _require_rng(rng)
    photos = _sample_photos(channels)
    images = np.empty((size, channels, height, width), dtype=np.float32)
    for i in range(size):
        photo = photos[int(rng.integers(len(photos)))]
        side = int(rng.integers(CROP_SIDES[0], CROP_SIDES[1] + 1))
        crop = _crop(photo, side, height, width, rng)
        images[i] = crop[None] if channels == 1 else crop.transpose(2, 0, 1)
    return images


def noise_images(size: int, shape: tuple[int, ...] = (1, 8, 8),
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """``size`` images of uniform noise in [0, 1), float32 [size, C, H, W]."""
    channels, height, width = _check_shape(shape)
    return _require_rng(rng).random((size, channels, height, width), dtype=np.float32)


# Distorted copies of each (font, character) in the typeset pool: 5 fonts x 36 characters x 24 =
# 4320 distinct images, some 8 times SDEA's default public set of 512, so a set rarely repeats a
# glyph at the same distortion, and still 24 looks at each glyph, about as many as ``glyphs`` has
# per (font, character) (200 per class over 16 fonts: 12-13).
TYPESET_VARIANTS = 24
TYPESET_POOL = len(HELD_OUT_FONTS) * len(CHARACTERS) * TYPESET_VARIANTS
_OPTDIGITS_RENDER = 48  # side of the ink image the optdigits conversion reads (its glyph box is about 34 px)


def typeset_items(size: int, rng: np.random.Generator | None = None) -> list[tuple[str, str, int]]:
    """``size`` distinct (font, character, variant) items of the typeset pool, in random order."""
    rng = _require_rng(rng)
    if size > TYPESET_POOL:
        raise ValueError(f"size: {size} is more than the {TYPESET_POOL} distinct images of the typeset source")
    fonts, rest = np.divmod(rng.choice(TYPESET_POOL, size=size, replace=False), len(CHARACTERS) * TYPESET_VARIANTS)
    characters, variants = np.divmod(rest, TYPESET_VARIANTS)
    return [(HELD_OUT_FONTS[f], CHARACTERS[c], int(v)) for f, c, v in zip(fonts, characters, variants)]


def typeset_images(size: int, shape: tuple[int, ...] = (1, 8, 8),
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """``size`` distinct typeset digits and letters in Computer Modern, float32 [size, C, H, W] in [0, 1].

    The items come from `typeset_items`, then each gets its own random distortion, like ``glyphs``'
    (an item is drawn once, so this is the same as fixing the pool's distortions first). At (1, 8, 8)
    the images go through the optdigits conversion, as scikit-learn's digits did (multiples of 1/16);
    at other shapes they are rendered at H x W, grayscale, repeated over 3 channels.
    """
    channels, height, width = _check_shape(shape)
    rng = _require_rng(rng)
    items = typeset_items(size, rng)
    images = np.empty((size, channels, height, width), dtype=np.float32)
    for i, ((font, character, _), distortion) in enumerate(zip(items, draw_distortions(size, rng))):
        if (height, width) == (8, 8):
            images[i] = optdigits_8x8(render(font, character, _OPTDIGITS_RENDER, _OPTDIGITS_RENDER, distortion))
        else:
            images[i] = render(font, character, height, width, distortion)
    return images


PUBLIC_SETS: dict[str, Callable[[int, tuple[int, ...], np.random.Generator], np.ndarray]] = {
    "sample_images": sample_image_crops,
    "noise": noise_images,
    "typeset": typeset_images,
}
# The most images each source can give (None: any number; crops and noise are drawn afresh).
PUBLIC_LIMITS: dict[str, int | None] = {"sample_images": None, "noise": None, "typeset": TYPESET_POOL}


def largest_public_size(source: str) -> int | None:
    """The largest ``size`` the public source ``source`` can give, or None where it is unlimited."""
    if source not in PUBLIC_LIMITS:
        raise ValueError(f"source: unknown public source {source!r}; valid: {', '.join(sorted(PUBLIC_LIMITS))}")
    return PUBLIC_LIMITS[source]


def public_images(config: PublicDataConfig, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """The public set ``config`` describes, at the clients' image ``shape``."""
    return PUBLIC_SETS[config.source](config.size, shape, rng)


def augment_views(x: torch.Tensor, generator: torch.Generator, min_area: float = 0.6,
                  flip_probability: float = 0.5) -> torch.Tensor:
    """A weak augmentation of a batch [B, C, H, W]: a random resized crop back to the same size
    (area fraction in [min_area, 1], aspect ratio in [3/4, 4/3]) and a random horizontal flip.

    All randomness comes from ``generator`` (a CPU torch Generator), so two calls give SDEA's two
    views and a rerun with the same seed gives the same views.
    """
    import torch
    import torch.nn.functional as F

    if x.ndim != 4 or not x.is_floating_point():
        raise ValueError(f"augment_views expects a float batch [B, C, H, W], got {tuple(x.shape)} {x.dtype}")
    draws = torch.rand(x.shape[0], 5, generator=generator, dtype=torch.float64)
    area = min_area + (1.0 - min_area) * draws[:, 0]
    ratio = torch.exp(math.log(3 / 4) + math.log(16 / 9) * draws[:, 1])
    scale_w = torch.sqrt(area * ratio).clamp(max=1.0)
    scale_h = torch.sqrt(area / ratio).clamp(max=1.0)
    flip = torch.where(draws[:, 4] < flip_probability, -1.0, 1.0)
    # An affine map in grid_sample's [-1, 1] coordinates: scale < 1 zooms into a crop, the shift
    # keeps that crop inside the image, and a negative x scale mirrors it.
    theta = torch.zeros(x.shape[0], 2, 3, dtype=torch.float64)
    theta[:, 0, 0] = scale_w * flip
    theta[:, 0, 2] = (1.0 - scale_w) * (2.0 * draws[:, 2] - 1.0)
    theta[:, 1, 1] = scale_h
    theta[:, 1, 2] = (1.0 - scale_h) * (2.0 * draws[:, 3] - 1.0)
    grid = F.affine_grid(theta.to(device=x.device, dtype=x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
