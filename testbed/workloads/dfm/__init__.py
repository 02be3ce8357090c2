"""Discrete Flow Models and Multiflow (Campbell, Yim et al., ICML 2024) as miniatures."""

from testbed.workloads.dfm.workload import DfmConfig, DiscreteFlow

__all__ = ["DfmConfig", "DiscreteFlow"]
