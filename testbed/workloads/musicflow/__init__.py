"""MusicFlow: cascaded flow matching for text-guided music generation (Prajwal et al., ICML 2024), in miniature."""

from testbed.workloads.musicflow.workload import MusicFlow, MusicflowConfig

__all__ = ["MusicFlow", "MusicflowConfig"]
