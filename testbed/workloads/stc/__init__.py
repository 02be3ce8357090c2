"""STC: spiking neurons with autaptic spatio-temporal circuits (Wang & Yu, ICML 2024) as a miniature.

Importing this package registers the ``moving_digits`` dataset in `testbed.data.DATASETS`.
"""

from testbed.workloads.stc.workload import Stc, StcConfig

__all__ = ["Stc", "StcConfig"]
