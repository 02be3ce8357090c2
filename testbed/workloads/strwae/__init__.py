"""StrWAE (Lee, Seong, Lee, Won, ICML 2024): Wasserstein autoencoders whose encoder structure and
penalties follow from the conditional-independence structure of the decoder; the ``strwae``
workload compares it with a plain WAE and an HSIC-penalised VAE on digits under four lights."""

from testbed.workloads.strwae.kernels import hsic, mmd, mutual_independence
from testbed.workloads.strwae.workload import StrWAEConfig, StrWAEWorkload

__all__ = ["StrWAEConfig", "StrWAEWorkload", "hsic", "mmd", "mutual_independence"]
