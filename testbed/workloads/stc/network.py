"""A small convolutional spiking network that predicts the next frame, and its recurrent rollouts.

Frames are cut into 2x2 patches (a 16x16 frame becomes 4 channels of 8x8, as the paper's
``patch_size``), pass through a stack of spiking layers, and a 1x1 convolution reads the next
frame out of the top layer's spikes (the paper's readout). The membranes carry the memory from
one step to the next; nothing else is recurrent.
"""

from __future__ import annotations

import torch
from torch import nn

from testbed.workloads.stc.neurons import SpikingLayer

PATCH = 2


class SpikingPredictor(nn.Module):
    """Spiking layers of ``neuron`` cells between a patch embedding and a 1x1 readout."""

    def __init__(self, neuron: str, channels: int, layers: int, frames_in: int, groups: int = 4,
                 gate_groups: int | None = None):
        super().__init__()
        self.frames_in = frames_in  # used by federated evaluation, which gets only the model
        widths = [PATCH * PATCH] + [channels] * layers
        self.layers = nn.ModuleList(SpikingLayer(a, b, neuron, groups, gate_groups=gate_groups)
                                    for a, b in zip(widths, widths[1:]))
        self.readout = nn.Conv2d(channels, PATCH * PATCH, 1)

    def parameter_count(self) -> int:
        """Trainable parameters (the comparison's capacity: LIF, PLIF and IF differ by at most one)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def initial_state(self, batch: int, height: int, width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        shape = (batch, self.readout.in_channels, height // PATCH, width // PATCH)
        device = self.readout.weight.device
        return [(torch.zeros(shape, device=device), torch.zeros(shape, device=device)) for _ in self.layers]

    def step(self, frame: torch.Tensor, state: list) -> tuple[torch.Tensor, list]:
        """Feed one frame ``[B, H, W]``; return the predicted next frame and the new state."""
        x = nn.functional.pixel_unshuffle(frame[:, None], PATCH)
        new_state = []
        for layer, layer_state in zip(self.layers, state):
            x, layer_state = layer(x, layer_state)
            new_state.append(layer_state)
        return nn.functional.pixel_shuffle(self.readout(x), PATCH)[:, 0], new_state

    def predict(self, frames: torch.Tensor, frames_in: int) -> torch.Tensor:
        """Next-frame predictions ``[B, T-1, H, W]`` of ``frames`` ``[B, T, H, W]``.

        Inputs are the true frames up to ``frames_in``, then the network's own predictions
        (closed loop), as in the paper's 10 -> 10 Moving-MNIST protocol.
        """
        batch, length, height, width = frames.shape
        state = self.initial_state(batch, height, width)
        outputs, frame = [], frames[:, 0]
        for t in range(length - 1):
            prediction, state = self.step(frame, state)
            outputs.append(prediction)
            frame = frames[:, t + 1] if t + 1 < frames_in else prediction
        return torch.stack(outputs, 1)

    def recall(self, inputs: torch.Tensor) -> torch.Tensor:
        """The output at the last input step (the cue) of a delayed-recall sequence ``[B, T, H, W]``."""
        batch, length, height, width = inputs.shape
        state = self.initial_state(batch, height, width)
        for t in range(length):
            output, state = self.step(inputs[:, t], state)
        return output
