"""The spatio-temporal prediction metrics of OpenSTL that the STC paper reports: MSE, MAE, SSIM, PSNR.

Frames are in [0, 1]. MSE and MAE are per pixel (OpenSTL sums over a frame's pixels; divide by
nothing here so the numbers do not depend on the canvas size); PSNR is ``10 log10(1 / MSE)`` per
frame, averaged; SSIM is Wang et al. (2004) with a 7x7 Gaussian window (sigma 1.5; the usual 11x11
window does not fit a 16x16 frame), C1 = 0.01^2, C2 = 0.03^2, averaged over the valid window positions.
"""

from __future__ import annotations

import torch

WINDOW = 7
SIGMA = 1.5
C1, C2 = 0.01**2, 0.03**2


def _window(device: torch.device) -> torch.Tensor:
    offsets = torch.arange(WINDOW, dtype=torch.float32, device=device) - (WINDOW - 1) / 2
    profile = torch.exp(-(offsets**2) / (2 * SIGMA**2))
    profile = profile / profile.sum()
    return (profile[:, None] * profile[None, :])[None, None]


def ssim(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean structural similarity of frames ``[..., H, W]`` (one value per frame)."""
    shape = prediction.shape[:-2]
    x = prediction.reshape(-1, 1, *prediction.shape[-2:])
    y = target.reshape(-1, 1, *target.shape[-2:])
    window = _window(prediction.device)
    blur = lambda image: torch.nn.functional.conv2d(image, window)
    mu_x, mu_y = blur(x), blur(y)
    var_x, var_y = blur(x * x) - mu_x**2, blur(y * y) - mu_y**2
    cov = blur(x * y) - mu_x * mu_y
    index = ((2 * mu_x * mu_y + C1) * (2 * cov + C2)) / ((mu_x**2 + mu_y**2 + C1) * (var_x + var_y + C2))
    return index.mean((1, 2, 3)).reshape(shape)


def frame_metrics(prediction: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """MSE, MAE, SSIM and PSNR of predicted frames ``[..., H, W]`` clipped to [0, 1]."""
    prediction = prediction.clamp(0, 1)
    per_frame_mse = ((prediction - target) ** 2).mean((-2, -1))
    psnr = 10 * torch.log10(1.0 / per_frame_mse.clamp_min(1e-10))
    return {"mse": float(per_frame_mse.mean()), "mae": float((prediction - target).abs().mean()),
            "ssim": float(ssim(prediction, target).mean()), "psnr": float(psnr.mean())}
