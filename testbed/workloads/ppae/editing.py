"""PPAE's training-free editing and its two baselines, on a trained `Denoiser`.

PPAE (Xu et al., ICML 2024), in the order of its pipeline:
1. DDIM inversion of the source clip under the source caption P, recording the cross-attention maps;
2. the local mask m: the maps of the edited token averaged over steps, layers and heads, scaled by
   their maximum over time, thresholded at ``threshold`` and dilated by one frame;
3. denoising from the inverted noise under the edited caption P*, with the source maps injected for
   the first ``inject_frac`` of the steps (Prompt-to-Prompt's word swap) or one token's map reweighted;
4. the local edit: after every step z* <- m z* + (1 - m) z_src (z_src: the inversion's latent at
   that noise level), so frames outside m stay the source's; then the global pass: the last
   ``global_frac`` of the steps run without blending, to smooth the seams.
Ablations of step 4 (`ppae_edit`'s ``blend`` and ``mask``): no local blend at all (injection only),
or the blend with a given mask (the true event's frames: the oracle) instead of the estimated one.
Baselines: ``regenerate`` (DDIM from the same inverted noise under P*, no control) and ``sdedit``
(noise the source to ``strength`` T, denoise under P*).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from testbed.workloads.ppae.model import AttentionControl, Denoiser


def ddim_timesteps(steps: int, count: int) -> list[int]:
    """``count`` timesteps from T - 1 down to 0, evenly spaced."""
    return [int(t) for t in torch.linspace(steps - 1, 0, count).round().long()]


def ddim_step(x: torch.Tensor, eps: torch.Tensor, a_now: torch.Tensor, a_next: torch.Tensor) -> torch.Tensor:
    """Deterministic DDIM move from signal share ``a_now`` to ``a_next`` (either direction)."""
    x0 = (x - (1 - a_now).sqrt() * eps) / a_now.sqrt()
    return a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps


def _share(abar: torch.Tensor, t: int | None) -> torch.Tensor:
    """abar at step ``t``; ``None`` is the clean end (share 1)."""
    return torch.tensor(1.0) if t is None else abar[t]


@torch.no_grad()
def invert(model: Denoiser, x0: torch.Tensor, caption: torch.Tensor, abar: torch.Tensor,
           timesteps: list[int]) -> tuple[dict[int, torch.Tensor], dict[int, list[torch.Tensor]]]:
    """DDIM inversion: the latent at every timestep, and the cross-attention maps used to reach it."""
    latents: dict[int, torch.Tensor] = {}
    maps: dict[int, list[torch.Tensor]] = {}
    x, previous = x0, None
    for t in reversed(timesteps):
        model.control = AttentionControl(record=True)
        eps = model(x, torch.full((len(x),), t), caption)
        maps[t] = model.control.maps
        x = ddim_step(x, eps, _share(abar, previous), abar[t])
        latents[t], previous = x, t
    model.control = None
    return latents, maps


def attention_mask(maps: dict[int, list[torch.Tensor]], position: torch.Tensor, threshold: float,
                   dilate: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The local edit mask ``[B, frames]`` (0/1) and the averaged map it came from.

    ``position``: per clip, the caption position of the edited token.
    """
    stacked = torch.stack([torch.stack(layer_maps) for layer_maps in maps.values()])  # [steps, layers, B, H, F, L]
    average = stacked.mean(dim=(0, 1, 3))  # [B, F, L]
    column = average.gather(2, position[:, None, None].expand(-1, average.shape[1], 1))[..., 0]
    relative = column / column.amax(1, keepdim=True).clamp_min(1e-12)
    mask = (relative >= threshold).float()
    if dilate:
        mask = F.max_pool1d(mask[:, None], 2 * dilate + 1, stride=1, padding=dilate)[:, 0]
    return mask, relative


@torch.no_grad()
def denoise(model: Denoiser, x: torch.Tensor, caption: torch.Tensor, abar: torch.Tensor,
            timesteps: list[int]) -> torch.Tensor:
    """Plain DDIM from ``x`` at ``timesteps[0]`` to the clean end."""
    for i, t in enumerate(timesteps):
        eps = model(x, torch.full((len(x),), t), caption)
        x = ddim_step(x, eps, abar[t], _share(abar, timesteps[i + 1] if i + 1 < len(timesteps) else None))
    return x


@torch.no_grad()
def ppae_edit(model: Denoiser, x0: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
              position: torch.Tensor, abar: torch.Tensor, timesteps: list[int], *, inject_frac: float,
              global_frac: float, threshold: float, scale: float = 1.0,
              inverted: tuple[dict, dict] | None = None, blend: bool = True,
              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The hierarchical local-global edit of ``x0`` from caption ``source`` to ``target``: (edited, mask).

    ``scale`` != 1 reweights the edited token's map (Prompt-to-Prompt's reweighting; with
    ``target`` = ``source`` this amplifies or attenuates the event in place). ``inverted``: the
    result of `invert` on ``x0`` and ``source``, when the caller has it already. Ablations:
    ``blend=False`` skips the local blend (the returned mask is then the one it would have used);
    ``mask`` (``[B, frames]``, 0/1) replaces the attention mask in the blend.
    """
    latents, maps = inverted if inverted is not None else invert(model, x0, source, abar, timesteps)
    if mask is None:
        mask, _ = attention_mask(maps, position, threshold)
    keep = mask[..., None]
    count, x = len(timesteps), latents[timesteps[0]]
    weight = None
    if scale != 1.0:
        weight = torch.ones(source.shape)
        weight[torch.arange(len(x)), position] = scale
    for i, t in enumerate(timesteps):
        inject = maps[t] if i < inject_frac * count else None
        model.control = AttentionControl(inject=inject, weight=weight)
        eps = model(x, torch.full((len(x),), t), target)
        following = timesteps[i + 1] if i + 1 < count else None
        x = ddim_step(x, eps, abar[t], _share(abar, following))
        if blend and i < (1 - global_frac) * count:  # local stage: outside the mask, the source's own latent
            x = keep * x + (1 - keep) * (latents[following] if following is not None else x0)
    model.control = None
    return x, mask


@torch.no_grad()
def regenerate(model: Denoiser, x0: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
               abar: torch.Tensor, timesteps: list[int]) -> torch.Tensor:
    """Baseline: the same inverted noise, denoised under the edited caption with no control."""
    latents, _ = invert(model, x0, source, abar, timesteps)
    return denoise(model, latents[timesteps[0]], target, abar, timesteps)


@torch.no_grad()
def sdedit(model: Denoiser, x0: torch.Tensor, target: torch.Tensor, abar: torch.Tensor, timesteps: list[int],
           strength: float, generator: torch.Generator) -> torch.Tensor:
    """Baseline (SDEdit): noise the source to ``strength`` of the schedule, then denoise under the edited caption."""
    start = next(i for i, t in enumerate(timesteps) if t <= strength * (len(abar) - 1))
    a = abar[timesteps[start]]
    x = a.sqrt() * x0 + (1 - a).sqrt() * torch.randn(x0.shape, generator=generator)
    return denoise(model, x, target, abar, timesteps[start:])
