"""ATraDiff: accelerating online RL with imaginary trajectories (Yang, Wang, ICML 2024) as a miniature.

``config`` holds the typed config `ATraDiffConfig` and its check (torch-free), ``workload`` the
`ATraDiffWorkload`, ``env`` MountainCarContinuous, its closed-form dynamics, goal test and reward,
the scripted offline policy and the window encoding, ``diffusion`` the trajectory and transition
diffusers, the length estimator and the pruner, ``generators`` ATraDiff's and SynthER's
imagination, ``sac`` the learner, ``learner`` its online loop, ``buffer`` the replay buffers, and
``report`` the report sections.
"""
