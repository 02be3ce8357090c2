"""ComGNN (Kazadi, Doss-Gollin, Silva, ICML 2024): hydraulics-informed message passing for pluvial flood
emulation on real DEM regions, its baselines, and the ``floodgnn`` workload."""

from testbed.workloads.floodgnn.models import ComGNN, MessagePassingGNN, RainIncrement
from testbed.workloads.floodgnn.workload import FloodGNNConfig, FloodGNNWorkload

__all__ = ["ComGNN", "FloodGNNConfig", "FloodGNNWorkload", "MessagePassingGNN", "RainIncrement"]
