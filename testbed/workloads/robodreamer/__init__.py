"""RoboDreamer: compositional text-to-video world models (Zhou et al., ICML 2024) as a miniature.

``config`` holds the typed config `RoboDreamerConfig` and its check (torch-free), ``workload`` the
`RoboDreamerWorkload`, ``world`` the grid world, its instructions and their parser, ``model`` the
video denoiser, its training loss and the compositional sampler, and ``report`` the report
sections.
"""
