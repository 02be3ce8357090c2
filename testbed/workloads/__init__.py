"""Scenario workloads, registered by name in `WORKLOADS` when their module is imported."""

from testbed.workloads.base import WORKLOADS, Workload, register
from testbed.workloads import classifier  # noqa: F401  (fills the registry)

__all__ = ["WORKLOADS", "Workload", "register"]
