"""The registry of scenario kinds and report kinds: two explicit tables, read lazily.

Each scenario kind is a package with a ``runner`` module (its `Runner`), a ``config`` module (its
block of the scenario, typed) and a ``report`` module (its sections). The tables name them as
``module:attribute`` strings, so that validating a scenario imports only the kind it runs.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from testbed.plugins import resolve

if TYPE_CHECKING:
    from testbed.report.sections import ReportLayout
    from testbed.runner import Runner

RUNNERS: dict[str, str] = {
    "workload": "testbed.workloads.runner:WorkloadRunner",
    "federated": "testbed.federated.runner:FederatedRunner",
    "decentralized": "testbed.decentralized.runner:DecentralizedRunner",
    "pretrain": "testbed.pretrain.runner:PretrainRunner",
}

# What a run of each kind imports that costs seconds: a sweep's warm server imports it once, and
# forks every variant process from there (`testbed.engines.warm`). Each must start no thread on
# import (the server refuses to fork then); Flower's and Ray's imports start none.
WARM_MODULES: tuple[str, ...] = (
    "testbed.execute", "testbed.determinism", "testbed.data.datasets", "torch._dynamo",
    "sklearn.datasets", "sklearn.metrics", "matplotlib.backends.backend_agg",
)
KIND_WARM_MODULES: dict[str, tuple[str, ...]] = {"federated": ("ray", "flwr.simulation")}
# The kinds whose runs launch a training rank on their own machine (`Engine.launch`), and what the
# rank imports: each of their variants gets a zygote, from which its rank is forked with these
# modules imported by the warm server (`testbed.engines.warm.zygote`).
KIND_RANK_MODULES: dict[str, tuple[str, ...]] = {"pretrain": ("testbed.pretrain.rank_modules",)}

# The sections each report kind adds to the generic ones (summary, metric curves, scenario), and
# where a scenario kind orders them its own way for a report kind (a federated DP run's privacy page).
REPORT_LAYOUTS: dict[str, str | None] = {
    "training": None,
    "robustness": "testbed.federated.report:LAYOUT",
    "privacy": "testbed.decentralized.report:LAYOUT",
    "pretraining": "testbed.pretrain.report:LAYOUT",
}
KIND_REPORT_LAYOUTS: dict[tuple[str, str], str] = {("federated", "privacy"): "testbed.federated.report:PRIVACY_LAYOUT"}


@cache
def runner(kind: str) -> Runner:
    """The runner of scenario kind ``kind`` (one instance per process)."""
    return resolve(RUNNERS[kind])()


def warm_modules(kind: str) -> tuple[str, ...]:
    """The modules a warm server imports for variants of scenario kind ``kind``."""
    return (*WARM_MODULES, RUNNERS[kind].partition(":")[0], *KIND_WARM_MODULES.get(kind, ()),
            *KIND_RANK_MODULES.get(kind, ()))


def launches_ranks(kind: str) -> bool:
    """Whether a run of scenario kind ``kind`` launches a training rank on its machine."""
    return kind in KIND_RANK_MODULES


def report_layout(report_kind: str, scenario_kind: str | None = None) -> ReportLayout | None:
    """The sections report kind ``report_kind`` adds to a run of ``scenario_kind``, or None for the generic page."""
    target = KIND_REPORT_LAYOUTS.get((scenario_kind or "", report_kind)) or REPORT_LAYOUTS.get(report_kind)
    return resolve(target) if target else None
