"""Runners: one per scenario ``kind``, registered in `RUNNERS`."""

from testbed.runners.base import RUNNERS, Runner, RunContext
from testbed.runners import decentralized, federated, pretrain, workload  # noqa: F401  (fill the registry)

__all__ = ["RUNNERS", "Runner", "RunContext"]
