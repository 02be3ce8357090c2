"""Differentiable coarsening of unstructured grids (Shumilin, Ryabov, Yavich, Burnaev, Vanovskiy).

``config`` holds the typed config `GridCoarsenConfig` and its check (torch-free), ``workload`` the
`GridCoarsenWorkload`, ``geometry`` the Voronoi geometry in torch (`geometry`, `topology`),
``solver`` the explicit finite-volume solvers, ``problem`` the fine grid and its k-means and random
coarse grids, ``coarsening`` the optimisation of a coarse grid's points, and ``report`` the report
sections.
"""
