"""DDDM: directly denoising diffusion models (Zhang, Wang, Luo, ICML 2024) as a miniature."""

from testbed.workloads.dddm.workload import Dddm, DddmConfig

__all__ = ["Dddm", "DddmConfig"]
