"""The three autoencoders compared: StrWAE, a plain WAE, and a VAE with an ad hoc HSIC penalty.

StrWAE's decoder has the structure of the generative model (Lee et al. 2024, the stacked model
for invariant representations with a semi-supervised label): ``Z ~ N(0, I)``, ``Y`` (digit) and
``S`` (light) independent; the identity code ``Z1 = h(Z, Y)``; the image ``X = g(Z1, S)``. The
encoder mirrors it: ``x -> (z, yhat)``, ``z1 = h(z, y or yhat)``. The plain WAE has no structure
(``x -> z -> x``); the VAE (an HCV-style baseline) decodes ``(z, s)`` and adds ``HSIC(z, s)``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from testbed.workloads.strwae.data import NUM_LIGHTS

NUM_DIGITS = 10
PIXELS = 64


def mlp(*sizes: int) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def one_hot(labels: torch.Tensor, classes: int) -> torch.Tensor:
    """Float one-hot rows of integer labels."""
    return F.one_hot(labels, classes).to(torch.get_default_dtype())


class StrWAE(nn.Module):
    """Encoder ``x -> (z, yhat)``, identity map ``h(z, y) = z1``, decoder ``g(z1, s) = x``."""

    def __init__(self, z_dim: int, z1_dim: int, hidden: int):
        super().__init__()
        self.trunk = nn.Sequential(mlp(PIXELS, hidden, hidden), nn.ReLU())
        self.to_z = nn.Linear(hidden, z_dim)
        self.to_label = nn.Linear(hidden, NUM_DIGITS)
        self.identity = mlp(z_dim + NUM_DIGITS, hidden, z1_dim)
        self.decoder = nn.Sequential(mlp(z1_dim + NUM_LIGHTS, hidden, hidden, PIXELS), nn.Sigmoid())

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z`` and the label logits."""
        features = self.trunk(x)
        return self.to_z(features), self.to_label(features)

    def identity_code(self, z: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """``z1 = h(z, y)``; ``label`` is a one-hot label or a predicted probability vector."""
        return self.identity(torch.cat([z, label], dim=1))

    def decode(self, z1: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.cat([z1, one_hot(light, NUM_LIGHTS)], dim=1))

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        """The invariant representation ``z1`` of an unlabelled image (its predicted label inside)."""
        z, logits = self.encode(x)
        return self.identity_code(z, logits.softmax(dim=1))


class PlainWAE(nn.Module):
    """WAE-MMD without structure: ``x -> z -> x``."""

    def __init__(self, z_dim: int, hidden: int):
        super().__init__()
        self.encoder = mlp(PIXELS, hidden, hidden, z_dim)
        self.decoder = nn.Sequential(mlp(z_dim, hidden, hidden, PIXELS), nn.Sigmoid())

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


class HsicVAE(nn.Module):
    """Gaussian VAE whose decoder also sees the light: ``q(z | x)``, ``p(x | z, s)``."""

    def __init__(self, z_dim: int, hidden: int):
        super().__init__()
        self.encoder = mlp(PIXELS, hidden, hidden, 2 * z_dim)
        self.decoder = nn.Sequential(mlp(z_dim + NUM_LIGHTS, hidden, hidden, PIXELS), nn.Sigmoid())

    def posterior(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of ``q(z | x)``."""
        mean, log_var = self.encoder(x).chunk(2, dim=1)
        return mean, log_var

    def decode(self, z: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.cat([z, one_hot(light, NUM_LIGHTS)], dim=1))

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.posterior(x)[0]
