"""RoboDreamer: compositional text-to-video world models (Zhou et al., ICML 2024) as a miniature."""

from testbed.workloads.robodreamer.workload import RoboDreamer, RoboDreamerConfig

__all__ = ["RoboDreamer", "RoboDreamerConfig"]
