"""ATraDiff: accelerating online RL with imaginary trajectories (Yang, Wang, ICML 2024) as a miniature."""

from testbed.workloads.atradiff.workload import AtraDiff, AtraDiffConfig

__all__ = ["AtraDiff", "AtraDiffConfig"]
