"""The video diffusion model of the RoboDreamer miniature and its compositional training and sampling.

One network predicts the video frames after the first frame x_0, conditioned on ONE component
embedding c (a phrase through the shared text encoder, a goal image through its encoder, or the
learned null condition). It is parametrised by its clean-video estimate tau^_0, from which the
noise estimate is eps_theta = (tau_t - sqrt(abar) tau^_0) / sqrt(1 - abar): for a fixed tau_t the
map is affine, so averaging eps over components is exactly averaging tau^_0 (and guidance too).
Composition is done outside the network, as in the paper:

* Eq. 1 / 2: the composed score is the mean of the component scores,
  eps(tau_t, t | L) = (1/N) sum_i eps_theta(tau_t, t | l_i)  (a product of experts p(tau | l_i)^(1/N)).
* Eq. 4: training regresses the mean over a random subset S' of the components onto the noise;
  we use the equivalent clean-video form, || mean tau^_0 - tau_0 ||^2, which drops Eq. 4's
  per-step weight abar / (1 - abar) (the usual "simple" reweighting; the minimiser is the same).
* Alg. 2: sampling with guidance, eps~ = eps_u + (w / N) sum_i (eps_i - eps_u), and DDIM steps.
The monolithic baseline is the same code with a single component, the whole sentence.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from testbed.workloads.robodreamer.world import VOCABULARY


def alpha_bars(steps: int) -> torch.Tensor:
    """Cumulative signal fractions of the cosine noise schedule (Nichol and Dhariwal), ``[steps]``."""
    s = 0.008
    grid = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
    f = torch.cos((grid + s) / (1 + s) * math.pi / 2) ** 2
    return (f[1:] / f[0]).clamp(1e-5, 0.9999).float()


class TextEncoder(nn.Module):
    """Learned token embeddings and a GRU; the phrase's embedding is the GRU state after its last word."""

    def __init__(self, embed: int):
        super().__init__()
        self.tokens = nn.Embedding(len(VOCABULARY), embed, padding_idx=0)
        self.gru = nn.GRU(embed, embed, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        lengths = (ids != 0).sum(1).clamp(min=1)
        states, _ = self.gru(self.tokens(ids))
        return states[torch.arange(len(ids)), lengths - 1]


class FilmBlock(nn.Module):
    """A residual pair of 3x3 convolutions whose features are scaled and shifted by the condition (FiLM)."""

    def __init__(self, channels: int, embed: int):
        super().__init__()
        self.first = nn.Conv2d(channels, channels, 3, padding=1)
        self.second = nn.Conv2d(channels, channels, 3, padding=1)
        self.film = nn.Linear(embed, 2 * channels)

    def forward(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, shift = self.film(cond)[:, :, None, None].chunk(2, dim=1)
        z = self.first(nn.functional.silu(h)) * (1 + scale) + shift
        return h + self.second(nn.functional.silu(z))


class VideoDenoiser(nn.Module):
    """tau^_0(tau_t, t | x_0, c): noisy frames and the first frame in, the clean frames' estimate out.

    A small convolutional network over the grid, the frames stacked as channels (a block moves one
    cell per frame, so 3x3 convolutions see the motion), conditioned by FiLM. It is preconditioned
    as in EDM (Karras et al. 2022) around the first frame, since most pixels repeat it:
    tau^_0 = x_0 + c_skip (tau_t / sqrt(abar) - x_0) + c_out F, with sigma^2 = (1 - abar) / abar.
    """

    SIGMA_DATA = 0.3  # about the spread of (frame - first frame) in the grid world
    abar: torch.Tensor  # a registered buffer

    def __init__(self, grid: int, frames: int, channels: int, embed: int, blocks: int, abar: torch.Tensor):
        super().__init__()
        self.grid, self.frames, self.steps = grid, frames, len(abar)
        self.register_buffer("abar", abar.clone(), persistent=False)
        self.text = TextEncoder(embed)
        self.goal = nn.Linear(3 * grid * grid, embed)  # the goal-image factor (Eqs. 5-6), optional
        self.null = nn.Parameter(torch.zeros(embed))  # the unconditional "component" for guidance
        self.time = nn.Sequential(nn.Linear(embed, embed), nn.SiLU(), nn.Linear(embed, embed))
        self.inp = nn.Conv2d(3 * frames + 3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(FilmBlock(channels, embed) for _ in range(blocks))
        self.out = nn.Conv2d(channels, 3 * frames, 3, padding=1)

    def time_embedding(self, t: torch.Tensor) -> torch.Tensor:
        half = self.null.numel() // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half) / half)
        angles = t.float()[:, None] * freqs[None] * (1000.0 / self.steps)
        return self.time(torch.cat([angles.sin(), angles.cos()], 1))

    def forward(self, noisy: torch.Tensor, t: torch.Tensor, first: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        batch, sd = len(noisy), self.SIGMA_DATA
        a = self.abar[t].reshape(batch, *[1] * (noisy.dim() - 1))
        sigma2 = (1 - a) / a
        offset = noisy / a.sqrt() - first[:, None]  # the noisy change from the first frame, in data units
        scaled = (offset / (sigma2 + sd**2).sqrt()).reshape(batch, -1, self.grid, self.grid)
        h = self.inp(torch.cat([scaled, first], 1))
        c = cond + self.time_embedding(t)
        for block in self.blocks:
            h = block(h, c)
        out = self.out(nn.functional.silu(h)).reshape(noisy.shape)
        c_skip = sd**2 / (sigma2 + sd**2)
        c_out = sigma2.sqrt() * sd / (sigma2 + sd**2).sqrt()
        return first[:, None] + c_skip * offset + c_out * out


def composed_estimate(model: VideoDenoiser, noisy: torch.Tensor, t: torch.Tensor, first: torch.Tensor,
                     conds: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k weights[:, k] * tau^_0(noisy, t | first, conds[:, k]) for conds ``[B, K, E]``, weights ``[B, K]``.

    All K components go through the one shared network in a single batch.
    """
    batch, count = weights.shape
    estimate = _per_component(model, noisy, t, first, conds)
    return (weights.reshape(batch, count, *[1] * (noisy.dim() - 1)) * estimate).sum(1)


def subset_weights(batch: int, count: int, p_null: float,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 4's random subsets: weights 1/M on M components (M uniform in 1..count), and a null mask.

    A row of the null mask is True with probability ``p_null``; that row is trained unconditionally.
    """
    sizes = torch.randint(1, count + 1, (batch,), generator=generator)
    ranks = torch.rand(batch, count, generator=generator).argsort(1).argsort(1)
    chosen = (ranks < sizes[:, None]).float()
    null = torch.rand(batch, generator=generator) < p_null
    return chosen / chosen.sum(1, keepdim=True), null


def training_loss(model: VideoDenoiser, video: torch.Tensor, first: torch.Tensor, conds: torch.Tensor,
                  abar: torch.Tensor, p_null: float, generator: torch.Generator) -> torch.Tensor:
    """Eq. 4 on videos ``[B, F, 3, G, G]`` in clean-video form: || (1/M) sum_{i in S'} tau^_0(l_i) - tau_0 ||^2."""
    batch, count = conds.shape[:2]
    t = torch.randint(0, len(abar), (batch,), generator=generator)
    noise = torch.randn(video.shape, generator=generator)
    a = abar[t].reshape(batch, *[1] * (video.dim() - 1))
    noisy = a.sqrt() * video + (1 - a).sqrt() * noise
    weights, null = subset_weights(batch, count, p_null, generator)
    conds = torch.where(null[:, None, None], model.null.expand_as(conds), conds)
    return (composed_estimate(model, noisy, t, first, conds, weights) - video).pow(2).mean()


@torch.no_grad()
def sample(model: VideoDenoiser, first: torch.Tensor, conds: torch.Tensor, abar: torch.Tensor, guidance: float,
           steps: int, generator: torch.Generator) -> torch.Tensor:
    """Alg. 2 with DDIM (eta = 0): eps~ = eps_u + (w / K) sum_k (eps_k - eps_u), ``steps`` denoising steps.

    ``conds`` ``[B, K, E]`` holds each sample's K component embeddings; returns frames ``[B, F, 3, G, G]``.
    """
    batch, count = conds.shape[:2]
    shape = (batch, model.frames, 3, model.grid, model.grid)
    x = torch.randn(shape, generator=generator)
    times = torch.linspace(len(abar) - 1, 0, steps).round().long()
    with_null = torch.cat([model.null.expand(batch, 1, -1), conds], 1)
    for index, step in enumerate(times):
        t = step.repeat(batch)
        estimate = _per_component(model, x, t, first, with_null)
        x0_u, x0_k = estimate[:, 0], estimate[:, 1:]
        # Guidance on eps and on the clean estimate agree: eps is affine in tau^_0 at fixed tau_t.
        x0 = (x0_u + guidance / count * (x0_k - x0_u[:, None]).sum(1)).clamp(-1, 1)
        a = abar[step]
        eps = (x - a.sqrt() * x0) / (1 - a).sqrt()
        a_next = abar[times[index + 1]] if index + 1 < len(times) else torch.tensor(1.0)
        x = a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps
    return x


def _per_component(model: VideoDenoiser, x: torch.Tensor, t: torch.Tensor, first: torch.Tensor,
                   conds: torch.Tensor) -> torch.Tensor:
    """Each component's clean-video estimate ``[B, K, ...]``, all K through the shared network in one batch."""
    batch, count = conds.shape[:2]
    estimate = model(x.repeat_interleave(count, 0), t.repeat_interleave(count, 0), first.repeat_interleave(count, 0),
                     conds.reshape(batch * count, -1))
    return estimate.reshape(batch, count, *x.shape[1:])
