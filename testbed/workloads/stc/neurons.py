"""Convolutional spiking neuron layers: LIF, PLIF, IF and the STC-LIF neuron with two autaptic pathways.

Every layer turns an input ``x_t`` into a current ``I_t = GN(Conv(x_t))``, charges a membrane H,
fires ``S_t = Theta(H_t - V_th)`` (Heaviside forward, sigmoid surrogate gradient backward) and
soft-resets ``V_t = H_t - V_th S_t``. They differ in the charge equation:

- LIF (tau = 2): ``H_t = (1 - 1/tau) V_{t-1} + (1/tau) I_t``.
- PLIF: the same with a learnable ``1/tau = sigmoid(w)`` per layer (Fang et al. 2021).
- IF (non-leaky): ``H_t = V_{t-1} + I_t``, no parameter beyond the current's.
- STC-LIF (Wang & Yu, ICML 2024, Eq. of the spatio-temporal circuit): the neuron's own previous
  spikes S_{t-1} drive two learnable pathways, a temporal gate on the membrane and a spatial gate
  on the input current,
  ``H_t = V_{t-1} * (1 + tanh(C_h(S_{t-1}))) + I_t * (1 + tanh(C_v(S_{t-1})))``,
  with C_h, C_v a grouped 3x3 convolution over the layer's spikes followed by GroupNorm; both gates
  lie in (0, 2), so retention can grow to perfect memory (or beyond) where the circuit needs it.
  The authors' C_h, C_v are grouped (16 groups of 16 of their 256 channels); ``gate_groups``
  defaults to one group per channel (depthwise: the authors' 16 groups at 16 channels), so the
  pathways add ``2 (9 C + 2 C)`` parameters a layer rather than ``2 (9 C^2 + 2 C)``. Where the
  previous spikes are all zero the convolutions give 0 and, with GroupNorm's shift at its initial
  0, both gates are exactly 1: an untrained STC-LIF neuron that has not fired is a non-leaky IF
  neuron (the ``if`` variant is that control).
"""

from __future__ import annotations

import torch
from torch import nn

THRESHOLD = 1.0


class SpikeFunction(torch.autograd.Function):
    """Heaviside step whose backward pass is the derivative of sigmoid(alpha * x)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        sig = torch.sigmoid(ctx.alpha * x)
        return grad * ctx.alpha * sig * (1 - sig), None


def spike(x: torch.Tensor, alpha: float = 4.0) -> torch.Tensor:
    """Fire where ``x >= 0`` with a sigmoid surrogate gradient of sharpness ``alpha``."""
    return SpikeFunction.apply(x, alpha)


def conv_norm(channels_in: int, channels_out: int, groups: int, conv_groups: int = 1) -> nn.Sequential:
    """3x3 convolution of ``conv_groups`` groups (no bias: GroupNorm's shift is the bias) followed by
    GroupNorm of ``groups`` groups."""
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False, groups=conv_groups),
                         nn.GroupNorm(groups, channels_out))


class SpikingLayer(nn.Module):
    """A convolutional layer of spiking neurons; ``neuron`` is ``lif``, ``plif``, ``if`` or ``stc``
    (``gate_groups``: groups of the STC gate convolutions, None for one per channel)."""

    def __init__(self, channels_in: int, channels: int, neuron: str, groups: int = 4, tau: float = 2.0,
                 gate_groups: int | None = None):
        super().__init__()
        self.neuron = neuron
        self.current = conv_norm(channels_in, channels, groups)
        self.tau = tau
        if neuron == "plif":  # sigmoid(w) = 1 / tau at initialisation
            self.w = nn.Parameter(torch.tensor(-float(torch.log(torch.tensor(tau - 1.0)))))
        if neuron == "stc":
            gate_groups = channels if gate_groups is None else gate_groups
            self.temporal = conv_norm(channels, channels, groups, gate_groups)  # C_h: gate on the membrane
            self.spatial = conv_norm(channels, channels, groups, gate_groups)  # C_v: gate on the input current

    def gates(self, spikes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The STC gates ``1 + tanh(C(S_{t-1}))`` on membrane and current, both in (0, 2)."""
        return 1 + torch.tanh(self.temporal(spikes)), 1 + torch.tanh(self.spatial(spikes))

    def charge(self, membrane: torch.Tensor, current: torch.Tensor, spikes: torch.Tensor) -> torch.Tensor:
        """H_t from the reset membrane V_{t-1}, the input current I_t and the previous spikes S_{t-1}."""
        if self.neuron == "stc":
            retain, admit = self.gates(spikes)
            return membrane * retain + current * admit
        if self.neuron == "if":
            return membrane + current
        inverse_tau = (torch.sigmoid(self.w) if self.neuron == "plif"
                       else torch.tensor(1.0 / self.tau, device=membrane.device))
        return (1 - inverse_tau) * membrane + inverse_tau * current

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, tuple]:
        """One time step: returns the spikes S_t and the new state (V_t, S_t)."""
        membrane, spikes = state
        charged = self.charge(membrane, self.current(x), spikes)
        fired = spike(charged - THRESHOLD)
        return fired, (charged - THRESHOLD * fired, fired)
