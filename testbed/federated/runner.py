"""``kind: federated``: Flower's simulation engine runs the clients, the testbed's round loop the server.

The kind needs the engine's ``ray`` capability: a Ray cluster connected in this process (started
in-process by ``local``, joined by ``ray``), on which Flower's Ray backend places the clients as
actors. Either way the same seed gives the same accuracy curve: see `testbed.federated.setup` and
`testbed.federated.server`.

Ctrl-C while Flower runs is deferred (`testbed.interrupts`): a KeyboardInterrupt raised in Flower's
main thread would make it shut Ray down under its own worker threads, which then wait forever on
their clients' results, and leave the round loop polling for replies that never come. Instead the
signal stops the round loop at once, Flower returns as it does at the end of a run (its workers
finish the client jobs in flight, it stops its actors and Ray), and the runner raises
KeyboardInterrupt.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from testbed.errors import UserError
from testbed.federated.config import FederatedConfig
from testbed.interrupts import deferred_interrupts
from testbed.runner import RunContext, Runner
from testbed.scenario import Scenario

if TYPE_CHECKING:
    from testbed.report.audit_page import Finding
    from testbed.report.render import RunData


def federated_config(scenario: Scenario) -> FederatedConfig:
    return scenario.federated or FederatedConfig()


class FederatedRunner(Runner):
    """Federated training on Flower with a robust strategy and optional Byzantine clients."""

    kind = "federated"
    needs_one_of = frozenset({"ray"})

    def check(self, scenario: Scenario, source: str) -> None:
        from testbed.federated.baselines import check_baselines
        from testbed.federated.checks import check_federated

        filled = scenario.model_copy(update={"federated": federated_config(scenario)})
        check_federated(filled, source)
        check_baselines(filled, source, check_federated)
        if scenario.report.audit_blocks():
            from testbed.workloads.audits import check_audits

            check_audits(scenario, source)

    def parallel_tasks(self, scenario: Scenario) -> int:
        return scenario.data.num_clients

    def audit_findings(self, data: RunData) -> list[Finding]:
        from testbed.federated.findings import federated_findings

        return federated_findings(data)

    def kept_across_runs(self) -> AbstractContextManager[None]:
        """The client actors: the next run's simulation trains on those of the last."""
        from testbed.federated.actor_pool import shared_client_actors

        return shared_client_actors()

    def run(self, ctx: RunContext) -> dict[str, Any]:
        from testbed.federated.actor_pool import shared_client_actors
        from testbed.federated.baselines import run_baselines

        with shared_client_actors():  # each baseline's simulation trains on the actors of the one before
            final = self._run_federation(ctx)
            return {**final, **run_baselines(ctx, self._run_federation)}

    def _run_federation(self, ctx: RunContext) -> dict[str, Any]:
        """The scenario's own federation, from its run folder's last checkpoint on."""
        from flwr.simulation import run_simulation

        from testbed.federated.actor_pool import ray_outlives_simulation
        from testbed.federated.client import make_client_app
        from testbed.federated.dp import private_strategy
        from testbed.federated.linkstate import indexed_simulation
        from testbed.federated.server import RoundLoop
        from testbed.federated.setup import federation_setup
        from testbed.federated.strategies import build_strategy

        scenario = ctx.scenario.model_copy(update={"federated": federated_config(ctx.scenario)})
        setup = federation_setup(scenario)
        checkpoint = ctx.run.latest_checkpoint()
        if checkpoint is None:
            ctx.run.write_artifacts({"label_histograms": setup.label_histograms(),
                                     "malicious": sorted(setup.malicious) or [-1]})
        initial = setup.build_model().state_dict()
        start, state = (checkpoint["step"], checked_global_state(checkpoint, initial, ctx)) if checkpoint \
            else (0, initial)
        assert scenario.federated is not None  # filled in above
        resources = scenario.federated.client_resources
        largest = ctx.engine.largest_node_cpus()
        if resources.num_cpus > largest:  # Flower would wait for an actor no node can host
            raise UserError(f"{ctx.source}: federated.client_resources.num_cpus: {resources.num_cpus:g} CPUs per "
                            f"client, but no node of the engine has more than {largest:g}")
        with quiet_flower():
            loop = RoundLoop(ctx, setup, private_strategy(build_strategy(setup), setup.scenario), start, state)
            if start < scenario.federated.rounds:  # a run resumed for its baselines has no round left
                with deferred_interrupts(loop.stop.set), indexed_simulation(), ray_outlives_simulation():
                    run_simulation(loop.server_app(), make_client_app(scenario), num_supernodes=setup.num_clients,
                                   backend_config={"client_resources": {"num_cpus": resources.num_cpus,
                                                                        "num_gpus": resources.num_gpus}})
        if loop.stop.is_set():
            raise KeyboardInterrupt
        if loop.error is not None:
            raise loop.error
        rounds = [r for r in ctx.run.read_metrics() if "round" in r]
        # Timings (``*_s``) vary from run to run; the summary's final metrics are the reproducible ones
        # (numbers: the last round's sample of clients, a list, stays in its round's record).
        final = {k: v for k, v in rounds[-1].items()
                 if k != "round" and not k.endswith("_s") and not isinstance(v, list)} if rounds else {}
        if scenario.report.audit_blocks():  # the audits a workload offers, on the final global model
            from testbed.workloads.audits import run_audits

            model = setup.build_model()
            model.load_state_dict(loop.state)
            final.update(run_audits(ctx, model, setup.test, members=setup.train))
        return final


def checked_global_state(checkpoint: dict[str, Any], model: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """The checkpoint's global model, where it has the scenario's model's names, shapes and dtypes;
    else (an edited or foreign checkpoint) a `UserError` naming the file, before Flower starts."""
    import torch

    state = checkpoint.get("global_state")
    if not isinstance(state, dict) or state.keys() != model.keys() or not all(
            isinstance(state[name], torch.Tensor) and state[name].shape == value.shape
            and state[name].dtype == value.dtype for name, value in model.items()):
        raise UserError(f"{ctx.run.latest_checkpoint_path()}: 'global_state' is not a state of the scenario's model "
                        "(other names, shapes or types); the run folder was altered")
    return state


@contextmanager
def quiet_flower() -> Iterator[None]:
    """Flower logs every round at INFO, a failed client's traceback at ERROR, and warns that
    run_simulation is deprecated; keep the console calm. A failed client reaches the round loop as
    an error reply, which the run reports in its own one line (`RoundLoop`)."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logger.setLevel(level)

