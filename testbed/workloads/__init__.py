"""Scenario workloads: one package per paper, listed in `testbed.workloads.registry`.

Nothing is imported here, so that reading a workload's typed config (``<package>.config``) does
not import every workload's model code; see the registry for the pattern each package follows.
"""
