"""The networks of GPGVAE and its two Monte Carlo gradient estimators.

- `TypeClassifier`: stage 1, an MLP that reads the interaction sign from the spectrum of cov(X).
- `EdgeEncoder`: q(A | X), a transformer over the players' action vectors whose pair logits are the
  symmetrised ``(mlp(h_i - h_j, c_ij) + mlp(h_j - h_i, c_ij)) / 2`` with c_ij the pair's action
  correlation (one Bernoulli per pair, K = 1 mixture component).
- `best_response_nll`: p(X | A), a one-layer GNN decoder that predicts each player's actions by
  message passing of the neighbours' actions over the sampled graph, ``x_i ~ N(g (Ã x)_i, s^2)``,
  the best-response map of the linear-quadratic game with a learnt slope g and scale s per graph.
- `elbo_loss`: NLL + beta_1 KL(q(A) || Bern(prior)), whose gradient through the discrete A is taken
  either by the score function (REINFORCE with a moving-average baseline) or by the binary-concrete
  relaxation (Maddison et al. 2017) at temperature tau.
"""

from __future__ import annotations

import torch
from torch import nn

from testbed.workloads.training import optimizer_step


class TypeClassifier(nn.Module):
    """p(complement | spectrum features): the gate of the prior."""

    mean: torch.Tensor  # buffers registered by train_type_classifier
    std: torch.Tensor

    def __init__(self, features: int = 20, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).squeeze(-1)


def train_type_classifier(features: torch.Tensor, labels: torch.Tensor, steps: int, seed: int) -> TypeClassifier:
    """Fit the classifier full-batch with Adam on standardised features (stage 1, before the VAE)."""
    torch.manual_seed(seed)
    mean, std = features.mean(0), features.std(0) + 1e-6
    model = TypeClassifier(features.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        loss = nn.functional.binary_cross_entropy_with_logits(model((features - mean) / std), labels)
        optimizer_step(optimizer, loss)
    model.register_buffer("mean", mean)
    model.register_buffer("std", std)
    return model


def predict_complement(model: TypeClassifier, features: torch.Tensor) -> torch.Tensor:
    """True where the classifier reads a strategic-complement game."""
    with torch.no_grad():
        return model((features - model.mean) / model.std) > 0


class EdgeEncoder(nn.Module):
    """q(A | X): logits of independent Bernoulli edges for every pair of players."""

    def __init__(self, games: int, width: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Linear(games, width)
        block = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.pair = nn.Sequential(nn.Linear(width + 1, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` [B, N, G] -> symmetric logits [B, N, N] (the diagonal is unused)."""
        h = self.transformer(self.embed(actions))
        difference = h[:, :, None, :] - h[:, None, :, :]
        # The pair's action correlation, a statistic of X the transformer would otherwise have to learn.
        centred = actions - actions.mean(-1, keepdim=True)
        unit = centred / centred.norm(dim=-1, keepdim=True)
        corr = (unit @ unit.transpose(1, 2))[..., None]
        one_way = self.pair(torch.cat([difference, corr], -1)).squeeze(-1)
        return (one_way + one_way.transpose(1, 2)) / 2


def upper_mask(nodes: int) -> torch.Tensor:
    """The pairs i < j, the independent variables of an undirected graph."""
    return torch.triu(torch.ones(nodes, nodes, dtype=torch.bool), diagonal=1)


def symmetric(upper: torch.Tensor) -> torch.Tensor:
    """Mirror the strict upper triangle of ``upper`` [B, N, N] into a symmetric matrix with zero diagonal."""
    triangle = torch.triu(upper, diagonal=1)
    return triangle + triangle.transpose(1, 2)


def sample_hard(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """A ~ Bern(sigmoid(logits)) on pairs i < j, mirrored."""
    uniform = torch.rand(logits.shape, generator=generator)
    return symmetric((uniform < torch.sigmoid(logits)).float())


def sample_relaxed(logits: torch.Tensor, tau: float, generator: torch.Generator) -> torch.Tensor:
    """Binary-concrete sample sigmoid((logits + log u - log(1-u)) / tau), differentiable in the logits."""
    uniform = torch.rand(logits.shape, generator=generator).clamp(1e-6, 1 - 1e-6)
    noise = torch.log(uniform) - torch.log1p(-uniform)
    return symmetric(torch.sigmoid((logits + noise) / tau))


def best_response_nll(actions: torch.Tensor, adjacency: torch.Tensor, slope: torch.Tensor,
                      log_scale: torch.Tensor) -> torch.Tensor:
    """-log p(X | A) per graph: x_i ~ N(slope * (D^-1/2 A D^-1/2 X)_i, exp(log_scale)^2)."""
    degree = adjacency.sum(-1).clamp_min(1e-3)
    inv_sqrt = degree.rsqrt()
    normalised = adjacency * inv_sqrt[:, :, None] * inv_sqrt[:, None, :]
    mean = slope[:, None, None] * (normalised @ actions)
    scale = log_scale.exp()[:, None, None]
    return (0.5 * ((actions - mean) / scale) ** 2 + log_scale[:, None, None]).sum((1, 2))


def bernoulli_kl(logits: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """KL(Bern(sigmoid(logits)) || Bern(prior)) summed over pairs i < j, per graph (analytic)."""
    q = torch.sigmoid(logits)
    log_q, log_not_q = nn.functional.logsigmoid(logits), nn.functional.logsigmoid(-logits)
    kl = q * (log_q - prior.log()) + (1 - q) * (log_not_q - torch.log1p(-prior))
    return (kl * upper_mask(logits.shape[-1])).sum((1, 2))


def log_prob_hard(logits: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """log q(A) of a hard sample, summed over pairs i < j, per graph."""
    log_p = sample * nn.functional.logsigmoid(logits) + (1 - sample) * nn.functional.logsigmoid(-logits)
    return (log_p * upper_mask(logits.shape[-1])).sum((1, 2))


def elbo_loss(logits: torch.Tensor, actions: torch.Tensor, prior: torch.Tensor, slope: torch.Tensor,
              log_scale: torch.Tensor, estimator: str, kl_weight: float, tau: float, baseline: torch.Tensor,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A surrogate loss whose gradient estimates that of the negative ELBO, and the per-graph NLL.

    ``score``: ``(NLL - b) * log q(A) + NLL`` with A hard and b the moving-average baseline (the
    second term trains the decoder); ``relaxed``: NLL of a binary-concrete A, differentiated directly.
    """
    kl = kl_weight * bernoulli_kl(logits, prior)
    if estimator == "relaxed":
        nll = best_response_nll(actions, sample_relaxed(logits, tau, generator), slope, log_scale)
        return (nll + kl).mean(), nll.detach()
    sample = sample_hard(logits, generator)
    nll = best_response_nll(actions, sample, slope, log_scale)
    advantage = (nll.detach() - baseline)
    return (advantage * log_prob_hard(logits, sample) + nll + kl).mean(), nll.detach()
