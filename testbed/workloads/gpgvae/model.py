"""The networks of GPGVAE and its two Monte Carlo gradient estimators.

- `TypeClassifier`: stage 1, an MLP that reads the interaction sign from the spectrum of cov(X).
- `EdgeEncoder`: q(A | X), a transformer over the players' action vectors whose pair logits are the
  symmetrised ``(mlp(h_i - h_j) + mlp(h_j - h_i)) / 2`` (one Bernoulli per pair, K = 1 mixture
  component). ``pair_correlation=True`` (an ablation, off by default) also feeds each pair's action
  correlation to the pair MLP, a statistic the paper's encoder does not get.
- `NodeEncoder`: q(Z | X) = N(mu(x_i), I), an MLP embedding of each player's action vector
  (the authors' ``gnn/encoder.py`` z-encoders; unit variance and KL_Z = |mu|^2 / 2 as there).
- `GCNDecoder`: p(X | A, Z), the paper's decoder (the authors' ``gnn/decoder.py``): GCN layers
  ``Z <- relu(norm(W (D^-1/2 (A + I) D^-1/2) Z))`` over the *sampled* graph on the latent node
  embeddings, then a linear map to each player's G actions; `gaussian_nll` scores X under it with a
  learnt scale per graph. The observed actions enter only through Z.
- `best_response_nll`: an ablation decoder, ``x_i ~ N(g (Ã x)_i, s^2)``, message passing of the
  *observed* neighbours' actions by the best-response map of the linear-quadratic game. It mirrors
  how the data are generated, so its likelihood alone finds the graph; it is not the paper's.
- `elbo_loss`: NLL + beta_1 KL(q(A) || Bern(prior)), whose gradient through the discrete A is taken
  either by the score function (REINFORCE with a moving-average baseline) or by the binary-concrete
  relaxation (Maddison et al. 2017) at temperature tau.
"""

from __future__ import annotations

from collections.abc import Callable

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

    def __init__(self, games: int, width: int = 64, layers: int = 2, heads: int = 4,
                 pair_correlation: bool = False):
        super().__init__()
        self.pair_correlation = pair_correlation
        self.embed = nn.Linear(games, width)
        block = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True)
        self.transformer = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.pair = nn.Sequential(nn.Linear(width + int(pair_correlation), width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` [B, N, G] -> symmetric logits [B, N, N] (the diagonal is unused)."""
        h = self.transformer(self.embed(actions))
        pair = h[:, :, None, :] - h[:, None, :, :]
        if self.pair_correlation:  # ablation: hand the pair MLP the statistic the gated prior is built from
            pair = torch.cat([pair, action_correlation(actions)[..., None]], -1)
        one_way = self.pair(pair).squeeze(-1)
        return (one_way + one_way.transpose(1, 2)) / 2


def action_correlation(actions: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of every pair of players' action vectors, [B, N, G] -> [B, N, N]."""
    centred = actions - actions.mean(-1, keepdim=True)
    unit = centred / centred.norm(dim=-1, keepdim=True)
    return unit @ unit.transpose(1, 2)


class NodeEncoder(nn.Module):
    """q(Z | X): the mean of each player's latent embedding, from that player's own action vector."""

    def __init__(self, games: int, width: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(games, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """``actions`` [B, N, G] -> mu [B, N, width]."""
        return self.net(actions)


class GCNDecoder(nn.Module):
    """p(X | A, Z): GCN layers over the sampled graph on the node embeddings, then a linear read-out."""

    def __init__(self, games: int, width: int = 64, layers: int = 2):
        super().__init__()
        # No bias in the convolution: the MLP's linear layer right after it holds one.
        self.convs = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(layers))
        self.mlps = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU())
                                  for _ in range(layers))
        self.out = nn.Linear(width, games)

    def forward(self, latent: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """``latent`` Z [B, N, H] and a (relaxed) sample of A [B, N, N] -> the mean of X [B, N, G]."""
        propagate = gcn_propagation(adjacency)
        h = latent
        for conv, mlp in zip(self.convs, self.mlps):
            h = mlp(propagate @ conv(h))  # GCNConv: D^-1/2 (A + I) D^-1/2 H W, then the authors' MLP
        return self.out(h)


def gcn_propagation(adjacency: torch.Tensor) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 of a batch of weighted adjacencies (self-loops as in GCNConv)."""
    looped = adjacency + torch.eye(adjacency.shape[-1], dtype=adjacency.dtype)
    inv_sqrt = looped.sum(-1).rsqrt()
    return looped * inv_sqrt[:, :, None] * inv_sqrt[:, None, :]


def gaussian_nll(actions: torch.Tensor, mean: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """-log p(X) per graph (up to a constant) for X ~ N(mean, exp(log_scale)^2), one scale per graph."""
    scale = log_scale.exp()[:, None, None]
    return (0.5 * ((actions - mean) / scale) ** 2 + log_scale[:, None, None]).sum((1, 2))


def latent_kl(mu: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, I) || N(0, I)) = |mu|^2 / 2 summed over players and dimensions, per graph."""
    return 0.5 * (mu**2).sum((1, 2))


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
    """Ablation decoder, -log p(X | A) per graph: x_i ~ N(slope * (D^-1/2 A D^-1/2 X)_i, exp(log_scale)^2).

    It passes the observed actions through the best-response map that generated them, so it is
    not the paper's decoder (`GCNDecoder`); kept to show how much such a likelihood finds alone.
    """
    degree = adjacency.sum(-1).clamp_min(1e-3)
    inv_sqrt = degree.rsqrt()
    normalised = adjacency * inv_sqrt[:, :, None] * inv_sqrt[:, None, :]
    return gaussian_nll(actions, slope[:, None, None] * (normalised @ actions), log_scale)


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


NLLOfGraph = Callable[[torch.Tensor], torch.Tensor]  # a sample of A [B, N, N] -> -log p(X | A, ...) [B]


def elbo_loss(logits: torch.Tensor, nll_of: NLLOfGraph, prior: torch.Tensor, estimator: str, kl_weight: float,
              tau: float, baseline: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A surrogate loss whose gradient estimates that of the negative ELBO's A part, and the per-graph NLL.

    ``nll_of`` is the decoder's NLL of the batch given a graph. ``score``: ``(NLL - b) * log q(A) + NLL``
    with A hard and b the moving-average baseline (the second term trains the decoder); ``relaxed``:
    NLL of a binary-concrete A, differentiated directly.
    """
    kl = kl_weight * bernoulli_kl(logits, prior)
    if estimator == "relaxed":
        nll = nll_of(sample_relaxed(logits, tau, generator))
        return (nll + kl).mean(), nll.detach()
    sample = sample_hard(logits, generator)
    nll = nll_of(sample)
    advantage = (nll.detach() - baseline)
    return (advantage * log_prob_hard(logits, sample) + nll + kl).mean(), nll.detach()
