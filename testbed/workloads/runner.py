"""``kind: workload``: train one workload centrally, checkpointing every ``checkpoint_every`` steps.

The training runs in chunks between checkpoints. Each chunk is one engine call (`Engine.call`)
that takes the previous state and returns the new one with its metrics records, so the driver
alone writes the run folder and a chunk computes the same numbers on whichever worker or node the
engine picks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from testbed.errors import ScenarioError, UserError
from testbed.runner import RunContext, Runner
from testbed.scenario import Scenario
from testbed.seeding import SeedTree, stream
from testbed.workloads import registry

if TYPE_CHECKING:
    from testbed.report.sections import ReportSection
    from testbed.workloads.base import Workload


# A workload is a plugin: it names the streams under its own child itself (data.split, model.init, ...).
WORKLOAD_STREAMS = stream("workload/*", "the workload's own streams, each named by the workload")


def build_workload(scenario: Scenario, seeds: SeedTree | None = None) -> Workload:
    """The scenario's workload, freshly initialised from ``seeds``: the run's ``workload`` child,
    or, used on its own (tests, notebooks), the same child of a tree built from the root seed."""
    assert scenario.workload is not None  # the loader requires it for this kind
    name = scenario.workload.name
    config = registry.config_class(name).model_validate(scenario.workload.params)
    seeds = seeds if seeds is not None else SeedTree(scenario.seed, strict=True).child("workload")
    return registry.workload_class(name)(config, scenario.data, seeds)


def train_chunk(scenario_data: dict, seeds: SeedTree, state: dict | None, start: int, stop: int
                ) -> tuple[dict, list[dict]]:
    """Train steps ``start..stop`` from ``state`` with the run's ``workload`` seed tree (``seeds``,
    handed down from the driver's context); emit a record at every ``eval_every`` boundary and at the end.

    Training metrics are averaged over the steps since the previous record, carried across
    chunks in the state, so records do not depend on where checkpoints fall.
    """
    import torch

    from testbed.determinism import single_threaded
    from testbed.device import run_device

    scenario = Scenario.model_validate(scenario_data)
    loop = scenario.training
    with single_threaded():
        workload = build_workload(scenario, seeds)
        workload.to_device(torch.device(run_device(scenario)))  # before a checkpoint loads: its state follows
        pending: dict[str, float] = {}
        pending_steps = 0
        if state is not None:
            workload.load_state_dict(state["workload"])
            pending, pending_steps = dict(state["pending"]), state["pending_steps"]
        records: list[dict[str, Any]] = []
        step = start
        while step < stop:
            span = min((step // loop.eval_every + 1) * loop.eval_every, stop) - step
            for key, value in workload.train(span).items():
                pending[key] = pending.get(key, 0.0) + value * span
            pending_steps += span
            step += span
            if step % loop.eval_every == 0 or step == loop.steps:
                means = {key: total / pending_steps for key, total in pending.items()}
                records.append({"step": step, **means, **workload.evaluate()})
                pending, pending_steps = {}, 0
        state = {"workload": workload.state_dict(), "pending": pending, "pending_steps": pending_steps}
        if stop == loop.steps:
            state["artifacts"] = workload.artifacts()
        return state, records


def check_finite_losses(records: list[dict[str, Any]], ctx: RunContext) -> None:
    """Stop a run whose loss became infinite or NaN: every later step would be wasted on NaNs. The
    checkpoints written so far hold the state from before the divergence, so the folder keeps them."""
    for record in records:
        for key, value in record.items():
            if "loss" in key and isinstance(value, float) and not math.isfinite(value):
                kept = (f"; the checkpoints up to step {ctx.run.latest_step} in {ctx.run.path} are from before it"
                        if ctx.run.has_checkpoint else "")
                where = f"{ctx.source}: " if ctx.source else ""
                workload = ctx.scenario.workload
                field = "workload.lr" if workload and "lr" in registry.config_class(workload.name).model_fields \
                    else "workload"
                raise UserError(f"{where}{field}: training diverged at step {record.get('step')} ({key} = {value}); "
                                f"lower the learning rate{kept}")


class WorkloadRunner(Runner):
    """Central training of a single workload."""

    kind = "workload"

    def check(self, scenario: Scenario, source: str) -> None:
        from testbed.data.select import check_file_dataset

        check_file_dataset(scenario.data, scenario.data.test_fraction, source)

    def report_sections(self, config: dict[str, Any]) -> list[ReportSection]:
        name = (config.get("workload") or {}).get("name")
        return list(registry.workload_class(name).report_sections) if name and registry.is_registered(name) else []

    def run(self, ctx: RunContext) -> dict[str, Any]:
        loop = ctx.scenario.training
        checkpoint = ctx.run.latest_checkpoint()
        state, step = (checkpoint["state"], checkpoint["step"]) if checkpoint else (None, 0)
        scenario_data, seeds = ctx.scenario.model_dump(mode="json"), ctx.seeds.child("workload")
        with ctx.progress.task("training", total=loop.steps, completed=step) as advance:
            while step < loop.steps:
                stop = min((step // loop.checkpoint_every + 1) * loop.checkpoint_every, loop.steps)
                try:
                    state, records = ctx.engine.call(train_chunk, scenario_data, seeds, state, step, stop)
                except ScenarioError as err:  # the data, read only now (a file dataset): name the scenario
                    raise ScenarioError(f"{ctx.source}: {err}" if ctx.source else str(err)) from None
                check_finite_losses(records, ctx)  # before the diverged state is checkpointed
                for record in records:
                    ctx.log_metrics(record)
                if "artifacts" in state:
                    ctx.run.write_artifacts(state.pop("artifacts"))
                ctx.run.save_checkpoint(stop, {"state": state})
                advance(stop - step, records[-1] if records else None)
                step = stop
        evaluated = [r for r in ctx.run.read_metrics() if any(k.startswith("test_") for k in r)]
        return {k: v for k, v in evaluated[-1].items() if k != "step"} if evaluated else {}
