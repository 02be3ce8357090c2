"""VSDM: variational Schrödinger diffusion models (Deng et al., ICML 2024) as a 2-D miniature."""

from testbed.workloads.vsdm.workload import Vsdm, VsdmConfig

__all__ = ["Vsdm", "VsdmConfig"]
