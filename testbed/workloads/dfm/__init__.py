"""Discrete Flow Models and Multiflow (Campbell, Yim et al., ICML 2024) as miniatures.

``config`` holds the workload's typed config and check (torch-free), ``sequences`` the sequence
task's data, validity rule and exact denoiser, ``codesign`` the 2-D chains of the co-design task,
``ctmc`` the corruption, losses and samplers, ``models`` the networks, ``metrics`` the metrics and
report arrays, ``report`` the report sections and ``workload`` the `DFMWorkload`.
"""
