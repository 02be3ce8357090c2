"""A user's own network for the README's own-experiment scenario: features -> width -> classes."""

from torch import nn


class TwoLayer(nn.Module):
    """Two linear layers with a ReLU between them."""

    def __init__(self, features: int, classes: int, width: int = 32):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(features, width), nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x):
        return self.layers(x)
