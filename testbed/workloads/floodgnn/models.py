"""ComGNN (Kazadi, Doss-Gollin, Silva) and its baselines, on a batch of D8 flow-direction graphs.

All depths and rains here are in the paper's transformed space, log(1 + x / 0.01) / 10.
One step maps (rain p^t, depth h^{t-1}, edge fluxes q^{t-1}) to (h^t, q^t):

- ``ComGNN`` (Eqs. 3-10): a per-cell **retention** MLP e_i = R([p_i, h_i]) (bias-free), then L
  **dispersion** blocks on the D8 edges i -> j: a momentum-like flux
  q_ij <- q_ij + sigmoid(G(x_i)) * F((x_i + z_i) - (x_j + z_j)) driven by the latent
  water-surface difference, and the mass-balance update x_i <- x_i + W(sum_in q - sum_out q)
  with a bias-free W, so the update sums to zero over the graph. q persists across time steps.
  The depth is decoded residually, h^t = h^{t-1} + D(x).
- ``MessagePassingGNN``: a generic encode-process-decode GNN (MeshGraphNet-like) on the same
  graph in both directions, rain and depth as node features, about the same parameter count.
- Rain-Incr: h^t = h^{t-1} + alpha p^t (transformed space, like the models' inputs), one
  parameter fitted in closed form on the training combinations.
"""

from __future__ import annotations

import torch
from torch import nn


def mlp(sizes: list[int], bias: bool = True) -> nn.Sequential:
    """Linear layers with tanh between them."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b, bias=bias))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def zero_last_layer(network: nn.Sequential) -> nn.Sequential:
    """Start a residual head at zero output, so an untrained model predicts "no change" instead of drifting."""
    last = network[-1]
    assert isinstance(last, nn.Linear)  # mlp ends with a linear layer
    nn.init.zeros_(last.weight)
    if last.bias is not None:
        nn.init.zeros_(last.bias)
    return network


def flux_divergence(q: torch.Tensor, edges: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """In-flow minus out-flow per node (N x d) of edge fluxes q (E x d) on directed ``edges`` (E x 2)."""
    div = torch.zeros(num_nodes, q.shape[1], dtype=q.dtype, device=q.device)
    return div.index_add(0, edges[:, 1], q).index_add(0, edges[:, 0], -q)


class ComGNN(nn.Module):
    """Hydraulics-informed message passing: retention, then L conservative dispersion blocks."""

    def __init__(self, hidden: int = 32, blocks: int = 2):
        super().__init__()
        self.hidden = hidden
        self.retention = mlp([2, hidden // 2, hidden, hidden], bias=False)
        self.elevation = nn.Linear(1, hidden)
        self.gates = nn.ModuleList([mlp([hidden, hidden]) for _ in range(blocks)])
        self.fluxes = nn.ModuleList([mlp([hidden, hidden, hidden]) for _ in range(blocks)])
        # Bias-free: a bias would add mass at every node and break the exact balance.
        self.mass = nn.ModuleList([nn.Linear(hidden, hidden, bias=False) for _ in range(blocks)])
        self.decoder = zero_last_layer(mlp([hidden, hidden, 1]))

    def initial_flux(self, edges: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(edges), self.hidden, device=edges.device)

    def dispersion(self, x: torch.Tensor, z: torch.Tensor, q: torch.Tensor,
                   edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The L flux / mass-balance blocks; also returns each block's mass update (for the balance test)."""
        updates = []
        for index, (gate, flux, mass) in enumerate(zip(self.gates, self.fluxes, self.mass)):
            surface = x + z
            source, target = edges[:, 0], edges[:, 1]
            q = q + torch.sigmoid(gate(x[source])) * flux(surface[source] - surface[target])
            update = mass(flux_divergence(q, edges, len(x)))
            updates.append(update)
            x = x + update
            if index < len(self.mass) - 1:
                x = torch.tanh(x)
        return x, q, updates

    def forward(self, rain: torch.Tensor, depth: torch.Tensor, elevation: torch.Tensor, q: torch.Tensor,
                edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        retained = self.retention(torch.stack([rain, depth], 1))
        x, q, _ = self.dispersion(retained, self.elevation(elevation[:, None]), q, edges)
        return depth + self.decoder(x)[:, 0], q


class MessagePassingGNN(nn.Module):
    """Generic encode-process-decode GNN on the undirected D8 graph (the paper's MeshGraphNet-style baseline)."""

    def __init__(self, hidden: int = 32, blocks: int = 2):
        super().__init__()
        self.encoder = mlp([3, hidden, hidden])
        self.edge_mlps = nn.ModuleList([mlp([2 * hidden, hidden, hidden]) for _ in range(blocks)])
        self.node_mlps = nn.ModuleList([mlp([2 * hidden, hidden, hidden]) for _ in range(blocks)])
        self.decoder = zero_last_layer(mlp([hidden, hidden, 1]))

    def initial_flux(self, edges: torch.Tensor) -> torch.Tensor:
        return torch.zeros(0, device=edges.device)

    def forward(self, rain: torch.Tensor, depth: torch.Tensor, elevation: torch.Tensor, q: torch.Tensor,
                edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = torch.cat([edges, edges.flip(1)])
        x = self.encoder(torch.stack([rain, depth, elevation], 1))
        for edge_mlp, node_mlp in zip(self.edge_mlps, self.node_mlps):
            messages = edge_mlp(torch.cat([x[both[:, 0]], x[both[:, 1]]], 1))
            received = torch.zeros_like(x).index_add(0, both[:, 1], messages)
            x = x + node_mlp(torch.cat([x, received], 1))
        return depth + self.decoder(x)[:, 0], q


class RainIncrement(nn.Module):
    """The one-parameter baseline h^t = h^{t-1} + alpha p^t (alpha set by `fit_rain_increment`)."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha)), requires_grad=False)

    def initial_flux(self, edges: torch.Tensor) -> torch.Tensor:
        return torch.zeros(0, device=edges.device)

    def forward(self, rain: torch.Tensor, depth: torch.Tensor, elevation: torch.Tensor, q: torch.Tensor,
                edges: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return depth + self.alpha * rain, q


# The three variants' step models (`rollout` calls their `initial_flux` and steps them).
FloodModel = ComGNN | MessagePassingGNN | RainIncrement


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def matched_baseline(reference: nn.Module, blocks: int) -> MessagePassingGNN:
    """The generic GNN whose width gives the parameter count closest to ``reference``'s."""
    target = parameter_count(reference)
    width = min(range(4, 129), key=lambda w: abs(parameter_count(MessagePassingGNN(w, blocks)) - target))
    return MessagePassingGNN(width, blocks)


def fit_rain_increment(rain: torch.Tensor, depth: torch.Tensor) -> float:
    """Least-squares alpha of h^t = alpha * sum_{s <= t} p^s over a rollout (rain, depth: T x nodes, transformed)."""
    cumulative = rain.double().cumsum(0)
    return float((cumulative * depth.double()).sum() / (cumulative * cumulative).sum())
