"""Training objectives of StrWAE and its two baselines.

StrWAE (Lee et al. 2024): the WAE objective ``E c(X, G(Q(X)))`` under the functional constraint
that the encoder's aggregate distribution of the decoder's inputs equals the generative model's
``P_Z x P_Y x P_S``. Relaxed with penalties, that constraint becomes

    recon + l_prior MMD(Q_Z, N(0, I))                (Z's marginal)
          + l_label MMD(Q_Yhat, P_Y)                 (the encoder's label marginal, unlabelled data)
          + l_hsic  HSIC(Z, (Y, S)) + HSIC(Y, S)     (mutual independence of the decoder's inputs)
          + l_attr  HSIC(Z1, S)                      (Z1 = h(Z, Y) must not depend on S)
          + l_ce    CE(yhat, y) on labelled data     (the encoder of an observed Y)

with the labelled images decoded from their true label and the unlabelled ones from ``yhat``.
The plain WAE keeps only ``recon + l_prior MMD``; the VAE baseline is a Gaussian ELBO plus the
ad hoc ``l_attr HSIC(z, s)`` of HCV-style models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from testbed.workloads.strwae.kernels import (
    category_gram,
    gaussian_gram,
    hsic,
    mmd,
    mutual_independence,
    soft_category_gram,
)
from testbed.workloads.strwae.models import NUM_DIGITS, HsicVAE, PlainWAE, StrWAE, one_hot

# Pixel noise variance of the VAE's Gaussian likelihood (images lie in [0, 1]).
VAE_PIXEL_VARIANCE = 0.05


@dataclass(frozen=True)
class Batch:
    """Images, digits and lights of one mini-batch."""

    x: torch.Tensor
    y: torch.Tensor
    s: torch.Tensor


@dataclass(frozen=True)
class PenaltyWeights:
    """The lambdas of the objectives above."""

    prior: float
    label_marginal: float
    cross_entropy: float
    independence: float
    invariance: float


def reconstruction(x: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
    """WAE's cost ``c(x, x') = ||x - x'||^2`` per image, averaged over the batch."""
    return (x - decoded).pow(2).sum(dim=1).mean()


def strwae_loss(model: StrWAE, unlabelled: Batch, labelled: Batch, prior_sample: torch.Tensor,
                weights: PenaltyWeights) -> tuple[torch.Tensor, dict[str, float]]:
    """StrWAE's penalised objective on an unlabelled and a labelled batch."""
    z_u, logits_u = model.encode(unlabelled.x)
    z_l, logits_l = model.encode(labelled.x)
    label_u, label_l = logits_u.softmax(dim=1), one_hot(labelled.y, NUM_DIGITS)
    z1_u, z1_l = model.identity_code(z_u, label_u), model.identity_code(z_l, label_l)
    recon = (reconstruction(unlabelled.x, model.decode(z1_u, unlabelled.s)) * len(z_u)
             + reconstruction(labelled.x, model.decode(z1_l, labelled.s)) * len(z_l)) / (len(z_u) + len(z_l))
    z, label, z1 = torch.cat([z_u, z_l]), torch.cat([label_u, label_l]), torch.cat([z1_u, z1_l])
    light = category_gram(torch.cat([unlabelled.s, labelled.s]))
    parts = {
        "recon": recon,
        "prior_mmd": mmd(z, prior_sample),
        "label_mmd": mmd(label_u, label_l, scale=1.0),
        "cross_entropy": F.cross_entropy(logits_l, labelled.y),
        "independence_hsic": mutual_independence([gaussian_gram(z), soft_category_gram(label), light]),
        "invariance_hsic": hsic(gaussian_gram(z1), light),
    }
    total = (recon + weights.prior * parts["prior_mmd"] + weights.label_marginal * parts["label_mmd"]
             + weights.cross_entropy * parts["cross_entropy"] + weights.independence * parts["independence_hsic"]
             + weights.invariance * parts["invariance_hsic"])
    return total, {k: v.item() for k, v in parts.items()}


def wae_loss(model: PlainWAE, batch: Batch, prior_sample: torch.Tensor,
             weights: PenaltyWeights) -> tuple[torch.Tensor, dict[str, float]]:
    """WAE-MMD: reconstruction plus ``l_prior MMD(Q_Z, N(0, I))``."""
    z = model.encoder(batch.x)
    recon, prior = reconstruction(batch.x, model.decoder(z)), mmd(z, prior_sample)
    return recon + weights.prior * prior, {"recon": recon.item(), "prior_mmd": prior.item()}


def vae_loss(model: HsicVAE, batch: Batch, noise: torch.Tensor,
             weights: PenaltyWeights) -> tuple[torch.Tensor, dict[str, float]]:
    """Negative ELBO of the light-conditioned VAE plus the ad hoc ``l_attr HSIC(z, s)``."""
    mean, log_var = model.posterior(batch.x)
    z = mean + (0.5 * log_var).exp() * noise
    recon = reconstruction(batch.x, model.decode(z, batch.s))
    kl = 0.5 * (mean.pow(2) + log_var.exp() - 1 - log_var).sum(dim=1).mean()
    invariance = hsic(gaussian_gram(z), category_gram(batch.s))
    total = recon / (2 * VAE_PIXEL_VARIANCE) + kl + weights.invariance * invariance
    return total, {"recon": recon.item(), "kl": kl.item(), "invariance_hsic": invariance.item()}

