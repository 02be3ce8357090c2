"""The generative models of the ATraDiff miniature: trajectory diffusers of several lengths with
initial-state inpainting, the length estimator, the pruner, and the SynthER-style transition diffuser.

Both diffusers are DDPM models (cosine schedule) on a flat vector, parametrised by their clean
estimate with EDM preconditioning (Karras et al. 2022), trained with EDM's loss weight (which
makes every noise level count alike, so the low-noise levels that fix step-to-step detail are not
drowned by the high ones) and sampled with DDIM. A trajectory diffuser of horizon L models windows
``[L, CHANNELS]`` conditioned on the first state (the paper's "initial state as the condition"):
the known entries enter the network as extra input channels (value and mask), in training as in
sampling, and overwrite the clean estimate there. Replacement alone is not enough: a network that
never sees the condition in training ignores it: its second state lay some twenty real steps
away from the given first one. The transition diffuser models single tuples (s, a, r, s', done),
as SynthER does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from testbed.workloads.atradiff import env as mc
from testbed.workloads.atradiff.env import CENTER, CHANNELS, GOAL, SCALE, denormalise, normalise


def alpha_bars(steps: int) -> torch.Tensor:
    """Cumulative signal fractions of the cosine noise schedule, ``[steps]``."""
    grid = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    f = torch.cos((grid + 0.008) / 1.008 * math.pi / 2) ** 2
    return (f[1:] / f[0]).clamp(1e-5, 0.9999).float()


class VectorDenoiser(nn.Module):
    """x^_0(x_t, t) for flat vectors: a residual MLP with EDM preconditioning.

    x^_0 = c_skip x_t / sqrt(abar) + c_out F(x_t / sqrt(abar) * c_in, t), sigma^2 = (1 - abar) / abar.
    """

    SIGMA_DATA = 0.5
    abar: torch.Tensor  # a registered buffer
    inp: nn.Module  # TemporalDenoiser's are convolutions
    out: nn.Module

    def __init__(self, dim: int, hidden: int, blocks: int, abar: torch.Tensor):
        super().__init__()
        self.register_buffer("abar", abar.clone(), persistent=False)
        self.inp = nn.Linear(dim + 16, hidden)
        self.blocks = nn.ModuleList(nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden)) for _ in range(blocks))
        self.out = nn.Sequential(nn.SiLU(), nn.Linear(hidden, dim))

    def forward(self, noisy: torch.Tensor, t: torch.Tensor, known: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """The clean estimate; entries where ``mask`` is set are ``known`` (unconditioned: no mask)."""
        a = self.abar[t][:, None]
        sigma2, sd2 = (1 - a) / a, self.SIGMA_DATA**2
        x = noisy / a.sqrt()
        h = self.inp(torch.cat([x / (sigma2 + sd2).sqrt(), noise_embedding(sigma2)], 1))
        for block in self.blocks:
            h = h + block(h)
        return _clean(x, self.out(h), sigma2, known, mask)


def noise_embedding(sigma2: torch.Tensor) -> torch.Tensor:
    """Sinusoidal features ``[B, 16]`` of the noise level's log-variance ``sigma2 [B, 1]``."""
    freqs = torch.exp(-math.log(1000.0) * torch.arange(8) / 8)
    angles = (0.25 * torch.log(sigma2)) * freqs[None] * 10
    return torch.cat([angles.sin(), angles.cos()], 1)


def _clean(x: torch.Tensor, out: torch.Tensor, sigma2: torch.Tensor, known: torch.Tensor | None,
           mask: torch.Tensor | None) -> torch.Tensor:
    """EDM's c_skip x + c_out F, with the known entries put back."""
    sd2 = VectorDenoiser.SIGMA_DATA**2
    estimate = sd2 / (sigma2 + sd2) * x + sigma2.sqrt() * VectorDenoiser.SIGMA_DATA / (sigma2 + sd2).sqrt() * out
    if mask is None:
        return estimate
    assert known is not None  # a mask comes with its known values
    return torch.where(mask, known, estimate)


class TemporalDenoiser(VectorDenoiser):
    """x^_0 for trajectory windows: 1-D convolutions over time (as Diffuser's temporal U-Net, without
    down-sampling), with the same EDM preconditioning; the windows stay flat ``[B, L * CHANNELS]`` outside.

    Convolutions over time see neighbouring rows, which is what the dynamics relate. The input has
    three groups of channels: the scaled noisy window, the known values (zero elsewhere) and the
    mask of known entries.
    """

    def __init__(self, length: int, hidden: int, blocks: int, abar: torch.Tensor):
        nn.Module.__init__(self)
        self.length = length
        self.register_buffer("abar", abar.clone(), persistent=False)
        self.inp = nn.Conv1d(3 * CHANNELS, hidden, 5, padding=2)
        self.film = nn.ModuleList(nn.Linear(16, 2 * hidden) for _ in range(blocks))
        self.convs = nn.ModuleList(nn.Conv1d(hidden, hidden, 5, padding=2) for _ in range(2 * blocks))
        self.out = nn.Conv1d(hidden, CHANNELS, 5, padding=2)

    def forward(self, noisy: torch.Tensor, t: torch.Tensor, known: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        a = self.abar[t][:, None]
        sigma2, sd2 = (1 - a) / a, self.SIGMA_DATA**2
        x = noisy / a.sqrt()
        embedding = noise_embedding(sigma2)
        if mask is None:
            given, flags = torch.zeros_like(x), torch.zeros_like(x)
        else:
            assert known is not None  # a mask comes with its known values
            given, flags = torch.where(mask, known, 0.0), mask.to(x.dtype).expand_as(x)
        groups = torch.stack([x / (sigma2 + sd2).sqrt(), given, flags], 1)  # [B, 3, L * CHANNELS]
        h = self.inp(groups.reshape(len(x), 3, self.length, CHANNELS).permute(0, 1, 3, 2)
                     .reshape(len(x), 3 * CHANNELS, self.length))
        for index, film in enumerate(self.film):
            scale, shift = film(embedding)[:, :, None].chunk(2, dim=1)
            z = self.convs[2 * index](nn.functional.silu(h)) * (1 + scale) + shift
            h = h + self.convs[2 * index + 1](nn.functional.silu(z))
        out = self.out(nn.functional.silu(h)).transpose(1, 2).reshape(x.shape)
        return _clean(x, out, sigma2, known, mask)


def denoising_loss(model: VectorDenoiser, x0: torch.Tensor, generator: torch.Generator,
                   reduce: bool = True, mask: torch.Tensor | None = None) -> torch.Tensor:
    """E_t,eps w(t) || x^_0(sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps, t) - x_0 ||^2 (per sample if not ``reduce``).

    w = (sigma^2 + sigma_data^2) / (sigma sigma_data)^2 is EDM's weight (the error of the network's
    own output F, which has unit scale at every noise level). Entries where ``mask`` is set are
    given to the model as known, as they will be when sampling.
    """
    t = torch.randint(0, len(model.abar), (len(x0),), generator=generator)
    noise = torch.randn(x0.shape, generator=generator)
    a = model.abar[t][:, None]
    sigma2, sd2 = (1 - a) / a, model.SIGMA_DATA**2
    weight = (sigma2 + sd2) / (sigma2 * sd2)
    estimate = model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, x0 if mask is not None else None, mask)
    error = (weight * (estimate - x0).pow(2)).mean(1)
    return error.mean() if reduce else error


@torch.no_grad()
def ddim_sample(model: VectorDenoiser, count: int, dim: int, steps: int, generator: torch.Generator,
                known: torch.Tensor | None = None, known_mask: torch.Tensor | None = None) -> torch.Tensor:
    """DDIM (eta = 0) with ``steps`` steps; entries where ``known_mask`` is set are inpainted from ``known``."""
    x = torch.randn(count, dim, generator=generator)
    times = torch.linspace(len(model.abar) - 1, 0, steps).round().long()
    for index, step in enumerate(times):
        a = model.abar[step]
        x0 = model(x, step.repeat(count), known, known_mask).clamp(-1.5, 1.5)
        eps = (x - a.sqrt() * x0) / (1 - a).sqrt()
        a_next = model.abar[times[index + 1]] if index + 1 < len(times) else torch.tensor(1.0)
        x = a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps
    return x


def sample_trajectories(model: VectorDenoiser, length: int, starts: np.ndarray, steps: int,
                        generator: torch.Generator, increments: bool = False) -> np.ndarray:
    """Windows ``[len(starts), length, CHANNELS]`` (raw units) whose first state is inpainted to ``starts``;
    with ``increments`` the model's later state channels are increments (``env.encode_windows``)."""
    count = len(starts)
    known = torch.zeros(count, length, CHANNELS)
    first = np.zeros((count, CHANNELS), dtype=np.float32)
    first[:, :2] = starts
    known[:, 0, :2] = torch.from_numpy(normalise(first)[:, :2])
    flat = ddim_sample(model, count, length * CHANNELS, steps, generator, known.flatten(1), first_state_mask(length))
    return mc.decode_windows(flat.reshape(count, length, CHANNELS).numpy(), increments)


def first_state_mask(length: int) -> torch.Tensor:
    """The entries of a flat window ``[length * CHANNELS]`` that hold its first state."""
    mask = torch.zeros(length, CHANNELS, dtype=torch.bool)
    mask[0, :2] = True
    return mask.flatten()


def prune(window: np.ndarray, task: mc.Task | None = None) -> dict[str, np.ndarray]:
    """The non-parametric pruner: cut a generated window at its first goal (or terminal) row.

    Returns the transitions up to there; the last is marked terminal if the goal was reached. With
    a ``task`` the cut, the done flag and the reward come from the environment's own goal test and
    reward function (``Task.relabel``); without, the goal is a position at least ``GOAL`` or the
    diffuser's done channel, and the reward is the diffuser's.
    """
    reached = task.at_goal(window[:, :2]) if task else (window[:, 0] >= GOAL) | (window[:, 4] > 0.5)
    reached[0] = False  # the given first state is never the end
    end = int(np.argmax(reached)) if reached.any() else len(window) - 1
    terminal = np.zeros(end, dtype=np.float32)
    if reached.any():
        terminal[-1] = 1.0
    pieces = {"obs": window[:end, :2], "act": window[:end, 2], "rew": window[:end, 3],
              "next": window[1 : end + 1, :2], "term": terminal}
    return task.relabel(pieces) if task else pieces


class LengthEstimator(nn.Module):
    """MLP(s_0) -> log(steps to the goal): picks the horizon of the diffuser to sample."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, states: np.ndarray) -> torch.Tensor:
        """log steps to the goal of each state ``[n, 2]`` (raw units)."""
        return self.net(torch.from_numpy(((states - CENTER[:2]) / SCALE[:2]).astype(np.float32))).squeeze(1)

    def estimate(self, states: np.ndarray) -> np.ndarray:
        """Estimated steps to the goal of each state ``[n, 2]`` (raw units)."""
        with torch.no_grad():
            return self(states).exp().numpy()


def choose_length(estimates: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The smallest horizon that covers each estimate (plus its final state), else the largest."""
    options = np.array(sorted(lengths))
    covered = options[None, :] >= estimates[:, None] + 1
    return np.where(covered.any(1), options[np.argmax(covered, 1)], options[-1])


def transition_vectors(obs, act, rew, nxt, term) -> np.ndarray:
    """SynthER's tuples ``[n, 7]`` (normalised): s, a, r, s', done."""
    first = normalise(np.concatenate([obs, act[:, None], rew[:, None], term[:, None]], 1))
    second = normalise(np.concatenate([nxt, np.zeros((len(nxt), 3), dtype=np.float32)], 1))[:, :2]
    return np.concatenate([first[:, :4], second, first[:, 4:5]], 1).astype(np.float32)


def split_transitions(vectors: np.ndarray) -> dict[str, np.ndarray]:
    """Generated tuples back to raw transitions (done thresholded at 0.5)."""
    head = denormalise(np.concatenate([vectors[:, :4], vectors[:, 6:7]], 1))
    nxt = denormalise(np.concatenate([vectors[:, 4:6], np.zeros((len(vectors), 3), dtype=np.float32)], 1))[:, :2]
    return {"obs": head[:, :2], "act": np.clip(head[:, 2], -1, 1), "rew": head[:, 3], "next": nxt,
            "term": (head[:, 4] > 0.5).astype(np.float32)}
