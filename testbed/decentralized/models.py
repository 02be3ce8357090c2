"""The node models as flat parameter vectors, and their per-sample clipped gradients.

Every node's model is one float32 vector (logistic regression: a weight matrix and a bias; MLP: two
layers), so a token, a gossip message or a checkpoint is a plain tensor and many nodes are a
``[nodes, D]`` matrix. Gradients follow DP-SGD (Abadi et al. 2016) as opacus computes them:
per-sample gradients of each linear layer, each scaled by ``min(1, C / (||g_i|| + 1e-6))`` (opacus
``DPOptimizer.clip_and_accumulate``), then averaged over the node's selected samples. Leading
dimensions broadcast, so one call serves a whole block of nodes (their samples padded to a common
length and masked). tests/decentralized checks the gradients against opacus' ``GradSampleModule``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

CLIP_EPS = 1e-6  # opacus' guard against division by a zero gradient norm


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a node model: ``arch`` on ``in_features`` inputs and ``num_classes`` outputs."""

    arch: str
    in_features: int
    num_classes: int
    hidden: int = 32

    def module(self, device: str = "cpu") -> torch.nn.Module:
        """The torch module whose parameters the flat vector holds (in ``parameters()`` order);
        on the ``meta`` device it only describes shapes and draws no random numbers."""
        with torch.device(device):
            if self.arch == "logreg":
                return torch.nn.Linear(self.in_features, self.num_classes)
            return torch.nn.Sequential(torch.nn.Linear(self.in_features, self.hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(self.hidden, self.num_classes))

    @property
    def shapes(self) -> dict[str, torch.Size]:
        return {name: p.shape for name, p in self.module("meta").named_parameters()}

    @property
    def num_params(self) -> int:
        return sum(math.prod(shape) for shape in _shapes(self).values())

    def init(self, seed: int) -> torch.Tensor:
        """Initial parameters: zeros for logistic regression (convex: no symmetry to break), torch's
        default initialisation drawn from ``seed`` for the MLP."""
        if self.arch == "logreg":
            return torch.zeros(self.num_params)
        with torch.random.fork_rng():  # leave the caller's global torch RNG as it was
            torch.manual_seed(seed)
            return torch.cat([p.detach().reshape(-1) for p in self.module().parameters()])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named parameter views of a flat vector."""
        params, start = {}, 0
        for name, shape in _shapes(self).items():
            size = math.prod(shape)
            params[name] = flat[start : start + size].reshape(shape)
            start += size
        return params


@functools.cache
def _shapes(spec: ModelSpec) -> dict[str, torch.Size]:
    """`ModelSpec.shapes`, computed once per spec (it is read on every forward pass)."""
    return spec.shapes


class FlatModel:
    """Forward pass, loss and clipped gradients of a `ModelSpec` on flat parameter vectors.

    Per-sample gradients are written out for the two linear layers the way opacus' grad samplers
    compute them for ``nn.Linear`` (the outer product of the backpropagated error and the layer
    input, one per sample), which is ten times faster than ``vmap(grad)`` for one node's batch.
    Leading dimensions broadcast: x [..., m, F] gives gradients [..., m, D].
    """

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    def _layers(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) of each linear layer, weight [..., out, in], for flat [..., D]."""
        layers, start = [], 0
        for shape in _shapes(self.spec).values():
            size = math.prod(shape)
            layers.append(flat[..., start : start + size].reshape(*flat.shape[:-1], *shape))
            start += size
        return list(zip(layers[0::2], layers[1::2]))

    def logits(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        hidden = x
        layers = self._layers(flat)
        for index, (weight, bias) in enumerate(layers):
            hidden = hidden @ weight.transpose(-1, -2) + bias.unsqueeze(-2)
            if index < len(layers) - 1:
                hidden = torch.relu(hidden)
        return hidden

    def per_sample_gradients(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Gradient of each sample's cross-entropy: flat [..., D], x [..., m, F], y [..., m] -> [..., m, D]."""
        inputs, pre = [x], []
        layers = self._layers(flat)
        for index, (weight, bias) in enumerate(layers):
            pre.append(inputs[-1] @ weight.transpose(-1, -2) + bias.unsqueeze(-2))
            if index < len(layers) - 1:
                inputs.append(torch.relu(pre[-1]))
        error = torch.softmax(pre[-1], dim=-1) - torch.nn.functional.one_hot(y, self.spec.num_classes)
        grads: list[torch.Tensor] = []
        for index in reversed(range(len(layers))):
            weight_grad = error.unsqueeze(-1) * inputs[index].unsqueeze(-2)  # [..., m, out, in]
            grads = [weight_grad.flatten(-2), error] + grads
            if index:
                error = (error @ layers[index][0]) * (pre[index - 1] > 0)
        return torch.cat(grads, dim=-1)

    def clipped_mean_gradient(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                              mask: torch.Tensor, clip: float) -> torch.Tensor:
        """Mean over the selected samples (``mask``) of per-sample gradients clipped to norm
        ``clip``; its norm is at most ``clip``. Leading node dimensions broadcast
        (params [b, D], x [b, m, F] -> [b, D]). A node with no selected sample contributes 0."""
        per_sample = self.per_sample_gradients(flat, x, y)
        factor = (clip / (per_sample.norm(dim=-1) + CLIP_EPS)).clamp(max=1.0) * mask
        total = (factor.unsqueeze(-1) * per_sample).sum(dim=-2)
        return total / mask.sum(dim=-1, keepdim=True).clamp(min=1)

    def evaluate(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """Accuracy and mean cross-entropy of one parameter vector on (x, y)."""
        with torch.no_grad():
            logits = self.logits(flat, x)
            loss = torch.nn.functional.cross_entropy(logits, y).item()
            accuracy = (logits.argmax(dim=1) == y).double().mean().item()
        return {"accuracy": accuracy, "loss": loss}
