"""VSDM: variational Schrödinger diffusion models (Deng et al., ICML 2024) as a 2-D miniature.

``config`` holds the workload's typed config and check (torch-free), ``shapes`` the data and the
distribution metrics, ``dynamics`` the linear forward SDE in closed form, ``bridge`` the score
network and the stochastic-approximation update of A, ``report`` the report sections and
``workload`` the `VSDMWorkload`.
"""
