"""GPGVAE: gated-prior graph VAEs for the latent structure of network games (Yu et al., ICML 2024)."""

from testbed.workloads.gpgvae.workload import Gpgvae, GpgvaeConfig

__all__ = ["Gpgvae", "GpgvaeConfig"]
