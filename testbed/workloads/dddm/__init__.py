"""DDDM: directly denoising diffusion models (Zhang, Wang, Luo, ICML 2024) as a miniature.

``config`` holds the workload's typed config and check (torch-free), ``diffusion`` the denoiser,
its training steps and the DDDM and DDIM samplers, ``metrics`` the data and the sample-quality
measures (MMD, the FID-like distance and its feature classifier), ``report`` the report sections
and ``workload`` the `DDDMWorkload`.
"""
