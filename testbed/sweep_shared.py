"""``sweep.processes: shared``: a sweep's variants run one after another in a few long-lived
processes, each keeping one Ray and the kind's reusable workers for all the variants it runs.

A sweep of many small federated variants spends most of each variant's CPU starting things: at
``testbed reproduce --size test`` a variant process took about 8 CPU-s, of which Ray's own
processes (GCS, raylet, dashboard and runtime-env agents, log and autoscaler monitors) about 2.6
and Flower's client actor about 4.2 before its clients had trained much (torch, Flower and torch's
compiler stack imported once more each time). Here each of the sweep's ``parallel`` slots is one
process (forked from the warm server, or fresh, as variants are) that starts the scenario's engine
once, opens the kind's `Runner.kept_across_runs` (federated: `shared_client_actors`, as a run's
baselines share them) and runs its variants with the CLI's own ``run`` and ``resume`` in-process
(`testbed.sweep_slot`, in the CLI's layer; this module is what the sweep needs of it):
the same run folders, summaries and numbers as a process per variant gives
(tests/sweeps/test_shared_variants.py).

What a variant gives up is a process of its own. A variant that fails as a run fails (an error, an
exception) is recorded failed and the slot goes on; one that kills the interpreter (a native crash,
the OOM killer) takes the slot's later variants with it, which the sweep records failed and
`testbed resume` runs again. Ctrl-C stops the slot after the variant it interrupts. Only on the
``local`` engine (a variant on a cluster runs where the placement puts it) and not for a kind that
launches training ranks (pretrain: each variant's rank is forked from its own zygote).
"""

from __future__ import annotations

from collections.abc import Sequence

from testbed.scenario import Scenario

MODULE = "testbed.sweep_slot"  # what a slot's process runs, as ``python -m testbed.sweep_slot``
NO_REPORT = "--no-report"


def refusal(kind: str, engine_type: str) -> str | None:
    """Why the variants of a sweep of ``kind`` on ``engine_type`` cannot share processes (a
    `ScenarioError` message), or None."""
    from testbed import kinds

    if engine_type != "local":
        return f"sweep.processes: shared runs on the local engine only (engine.type is '{engine_type}'); use warm"
    if kinds.launches_ranks(kind):
        return f"sweep.processes: shared: not for {kind} scenarios, whose runs launch training ranks; use warm"
    return None


def check(scenario: Scenario, source: str) -> None:
    """Refuse (`ScenarioError`) a sweep that asks for shared processes where they cannot be."""
    from testbed.errors import ScenarioError

    if scenario.sweep is not None and scenario.sweep.processes == "shared":
        why = refusal(scenario.kind, scenario.engine.type)
        if why is not None:
            raise ScenarioError(f"{source}: {why}")


def slots(folders: Sequence[str], parallel: int) -> list[list[str]]:
    """The variants of each slot's process: dealt in turn, so that every slot gets some of each
    stretch of the sweep's order (reproduce orders it strategy by strategy)."""
    count = max(1, min(parallel, len(folders)))
    return [list(folders[slot::count]) for slot in range(count)]


def slot_arguments(folders: Sequence[str], report: bool) -> list[str]:
    """The command line of a slot's process."""
    return [*([] if report else [NO_REPORT]), *folders]
