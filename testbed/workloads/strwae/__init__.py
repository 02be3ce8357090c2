"""StrWAE (Lee, Seong, Lee, Won, ICML 2024): Wasserstein autoencoders whose encoder structure and
penalties follow from the conditional-independence structure of the decoder; the ``strwae``
workload compares it with a plain WAE and an HSIC-penalised VAE on digits under four lights.

``config`` holds the workload's typed config and check (torch-free), ``data`` the lit digits,
``kernels`` MMD and HSIC, ``models`` the networks, ``objectives`` the three training losses,
``metrics`` the probes and the generation judge, ``report`` the report sections and ``workload``
the `StrWAEWorkload`.
"""
