"""Scenario workloads, registered by name in `WORKLOADS` when their module is imported."""

from testbed.workloads.base import WORKLOADS, Workload, register
from testbed.workloads import classifier  # noqa: F401  (fills the registry)
from testbed.workloads import bisam  # noqa: F401
from testbed.workloads import aco  # noqa: F401
from testbed.workloads import strwae  # noqa: F401
from testbed.workloads import vsdm  # noqa: F401
from testbed.workloads import dfm  # noqa: F401
from testbed.workloads import dddm  # noqa: F401
from testbed.workloads import oodrobust  # noqa: F401
from testbed.workloads import gpgvae  # noqa: F401
from testbed.workloads import stc  # noqa: F401
from testbed.workloads import gridcoarsen  # noqa: F401
from testbed.workloads import floodgnn  # noqa: F401
from testbed.workloads import musicflow  # noqa: F401
from testbed.workloads import ppae  # noqa: F401
from testbed.workloads import robodreamer  # noqa: F401
from testbed.workloads import atradiff  # noqa: F401
from testbed.plugins import load_entry_points

# Installed packages add workloads through the `testbed.workloads` entry-point group.
load_entry_points("testbed.workloads", WORKLOADS, Workload, as_class=True)

__all__ = ["WORKLOADS", "Workload", "register"]
