"""Dataset shifts by synthetic corruption: CIFAR-10-C's recipe (Hendrycks & Dietterich 2019) sized for
8x8 digits in [0, 1], the corruption half of OODRobustBench's 23 dataset shifts.

Each corruption takes a severity 1..5; the parameters grow with the severity, and the random draws
come from the generator alone, so the same generator gives *common random numbers* across
severities (the same noise pattern, scaled): the distance to the clean image then grows with the
severity sample by sample for the additive corruptions, and on average for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch.nn import functional as F

CorruptionName = Literal["gaussian_noise", "shot_noise", "impulse_noise", "gaussian_blur", "contrast",
                         "brightness", "translate", "elastic"]
CORRUPTIONS: tuple[str, ...] = get_args(CorruptionName)

# Parameter per severity 1..5 (index 0 unused so that SEVERITY[s] reads naturally).
NOISE_STD = (0.0, 0.08, 0.14, 0.2, 0.28, 0.38)
SHOT_RATE = (0.0, 40.0, 20.0, 10.0, 5.0, 3.0)  # photons per unit intensity: fewer is noisier
IMPULSE_FRACTION = (0.0, 0.03, 0.06, 0.1, 0.16, 0.24)
BLUR_SIGMA = (0.0, 0.4, 0.55, 0.7, 0.85, 1.0)
CONTRAST_FACTOR = (1.0, 0.7, 0.55, 0.4, 0.3, 0.2)
BRIGHTNESS_OFFSET = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
TRANSLATE_PIXELS = (0.0, 0.3, 0.6, 0.9, 1.2, 1.5)
ELASTIC_PIXELS = (0.0, 0.3, 0.5, 0.7, 0.9, 1.1)


def gaussian_noise(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """Additive white Gaussian noise of standard deviation ``NOISE_STD[severity]``."""
    return (x + NOISE_STD[severity] * torch.randn(x.shape, generator=generator)).clamp(0, 1)


def shot_noise(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """Photon (Poisson) noise: ``rate * x`` expected counts per pixel, rescaled."""
    rate = SHOT_RATE[severity]
    return (torch.poisson(x * rate, generator=generator) / rate).clamp(0, 1)


def impulse_noise(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """Salt and pepper: a pixel hit (uniform draw below the fraction) becomes 0 or 1."""
    hit = torch.rand(x.shape, generator=generator) < IMPULSE_FRACTION[severity]
    salt = (torch.rand(x.shape, generator=generator) < 0.5).to(x.dtype)
    return torch.where(hit, salt, x)


def gaussian_blur(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """A 5x5 Gaussian blur of width ``BLUR_SIGMA[severity]`` pixels (zero padding: black border)."""
    sigma = BLUR_SIGMA[severity]
    offsets = torch.arange(-2, 3, dtype=x.dtype)
    kernel_1d = torch.exp(-offsets ** 2 / (2 * sigma ** 2))
    kernel = torch.outer(kernel_1d, kernel_1d) / kernel_1d.sum() ** 2
    channels = x.shape[1]
    return F.conv2d(x, kernel.expand(channels, 1, 5, 5), padding=2, groups=channels)


def contrast(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """Pull every pixel towards the image mean by the factor ``CONTRAST_FACTOR[severity]``."""
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * CONTRAST_FACTOR[severity] + mean


def brightness(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """Add ``BRIGHTNESS_OFFSET[severity]`` to every pixel (the background turns grey)."""
    return (x + BRIGHTNESS_OFFSET[severity]).clamp(0, 1)


def _warp(x: torch.Tensor, flow_pixels: torch.Tensor) -> torch.Tensor:
    """Resample ``x`` at positions displaced by ``flow_pixels`` (N, H, W, 2), in pixels."""
    n, _, height, width = x.shape
    identity = torch.eye(2, 3, dtype=x.dtype).expand(n, 2, 3)
    grid = F.affine_grid(identity, list(x.shape), align_corners=False)
    scale = torch.tensor([2.0 / width, 2.0 / height], dtype=x.dtype)
    return F.grid_sample(x, grid + flow_pixels * scale, mode="bilinear", padding_mode="zeros", align_corners=False)


def translate(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """A sub-pixel shift of the whole image in a random direction."""
    angle = torch.rand(len(x), generator=generator) * 2 * torch.pi
    shift = torch.stack([angle.cos(), angle.sin()], dim=1) * TRANSLATE_PIXELS[severity]
    return _warp(x, shift[:, None, None, :].expand(len(x), x.shape[2], x.shape[3], 2))


def elastic(x: torch.Tensor, severity: int, generator: torch.Generator) -> torch.Tensor:
    """A smooth random displacement field (coarse 3x3 noise upsampled), peak ``ELASTIC_PIXELS`` pixels."""
    coarse = torch.randn(len(x), 2, 3, 3, generator=generator)
    field = F.interpolate(coarse, size=tuple(x.shape[-2:]), mode="bicubic", align_corners=True)
    field = field / field.abs().amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-12)
    return _warp(x, field.permute(0, 2, 3, 1) * ELASTIC_PIXELS[severity])


CORRUPTION_FUNCTIONS: dict[str, Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]] = {
    "gaussian_noise": gaussian_noise, "shot_noise": shot_noise, "impulse_noise": impulse_noise,
    "gaussian_blur": gaussian_blur, "contrast": contrast, "brightness": brightness,
    "translate": translate, "elastic": elastic,
}


def corrupt(x: torch.Tensor, name: str, severity: int, generator: torch.Generator) -> torch.Tensor:
    """``x`` under corruption ``name`` at ``severity`` (1..5), kept in [0, 1]."""
    if not 1 <= severity <= 5:
        raise ValueError(f"severity must be 1..5, got {severity}")
    return CORRUPTION_FUNCTIONS[name](x, severity, generator).clamp(0, 1)
