"""PPAE: prompt-guided precise audio editing with diffusion models (Xu et al., ICML 2024), in miniature."""

from testbed.workloads.ppae.workload import Ppae, PpaeConfig

__all__ = ["Ppae", "PpaeConfig"]
