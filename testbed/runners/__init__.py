"""Runners: one per scenario ``kind``, registered in `RUNNERS`."""

from testbed.runners.base import RUNNERS, Runner, RunContext
from testbed.runners import federated, workload  # noqa: F401  (fill the registry)

__all__ = ["RUNNERS", "Runner", "RunContext"]
