"""Reference arms run beside a federated scenario: ``federated.baselines``.

A robustness number means little alone: "SDEA reaches 81% under LIE" is only worth reading next to
what FedAvg reaches under the same attack and what SDEA reaches without it. A scenario can ask for
those arms by name::

    federated:
      strategy: {name: sdea}
      attack: {name: lie, fraction: 0.4}
      baselines: [fedavg, no_attack]     # FedAvg under the same attack; SDEA without attackers

A strategy name (any of `testbed list strategies`, with its default parameters) replaces the
scenario's strategy; ``no_attack`` removes the attack and keeps the strategy; ``no_privacy`` removes
the privacy block (the privacy-utility question: what the DP run's accuracy costs) and runs the
rounds the private run completes (`last_round`: its budget may stop it early), so both arms are
compared after the same number of rounds. Everything else,
the root seed included, is the scenario's, so each baseline sees the same partitions, the same
initial model and (under an attack) the same Byzantine clients: the comparison is paired.

Each baseline is a run folder under ``<run>/baselines/<name>/`` (config, metrics, checkpoints,
per-client record and summary; its report is the main run's Baselines section), run after the main
federation on the same engine, one at a time (two federations at once can deadlock on Flower's
actor pools, docs/cluster.md), and resumed from its own checkpoints. Its final metrics join the
main run's as ``baselines.<name>.<metric>``, so a claim can compare arms within one run.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Any

from testbed.errors import ScenarioError, UserError, did_you_mean, shorten
from testbed.run import RunFolder
from testbed.runner import RunContext
from testbed.scenario import Scenario

NO_ATTACK = "no_attack"
NO_PRIVACY = "no_privacy"
BASELINES_DIR = "baselines"
# The final metrics a baseline contributes to the main run's summary.
COMPARED_METRICS = ("test_accuracy", "test_loss", "malicious_weight", "attacker_auroc")


def baseline_names() -> list[str]:
    """Every valid entry of ``federated.baselines``."""
    from testbed.federated.strategies import registered_strategies

    return [NO_ATTACK, NO_PRIVACY, *sorted(registered_strategies())]


def baseline_scenario(scenario: Scenario, name: str) -> Scenario:
    """The scenario of baseline ``name``: the strategy or the attack replaced, nothing else."""
    federated = scenario.federated
    assert federated is not None  # a federated scenario
    if name == NO_ATTACK:
        changed = federated.model_copy(update={"attack": None, "baselines": []})
    elif name == NO_PRIVACY:
        from testbed.federated.privacy import last_round

        rounds = last_round(federated, scenario.data.num_clients)
        changed = federated.model_copy(update={"privacy": None, "rounds": rounds, "baselines": []})
    else:
        from testbed.config import PluginSpec

        changed = federated.model_copy(update={"strategy": PluginSpec(name=name), "baselines": []})
    return scenario.model_copy(update={"federated": changed, "name": f"{scenario.name}-{name}"})


def check_baselines(scenario: Scenario, source: str, check: Callable[[Scenario, str], None]) -> None:
    """Refuse an unknown or pointless baseline, and one whose own scenario cannot run (``check``
    is the kind's validation: Krum as a baseline needs its 2f+3 clients like Krum as the strategy)."""
    from testbed.federated.strategies import server_samples

    federated = scenario.federated
    assert federated is not None  # a federated scenario
    valid = baseline_names()
    seen: set[str] = set()
    for index, name in enumerate(federated.baselines):
        field = f"federated.baselines[{index}]"
        if name not in valid:
            raise ScenarioError(f"{source}: {field}: unknown baseline {shorten(name)}{did_you_mean(name, valid)}; "
                                f"valid: {', '.join(valid)}")
        if name in seen:
            raise ScenarioError(f"{source}: {field}: {name!r} is listed twice")
        seen.add(name)
        if name == NO_ATTACK and federated.attack is None:
            raise ScenarioError(f"{source}: {field}: 'no_attack' needs a federated.attack to remove")
        if name == NO_PRIVACY and federated.privacy is None:
            raise ScenarioError(f"{source}: {field}: 'no_privacy' needs a federated.privacy to remove")
        if name == federated.strategy.name:
            raise ScenarioError(f"{source}: {field}: {name!r} is the scenario's own strategy")
        arm = baseline_scenario(scenario, name)
        holder = next((s.name for s in (federated.strategy, arm.federated.strategy)  # type: ignore[union-attr]
                       if server_samples(s)), None)
        if holder is not None:
            # A server-held set (FLTrust's root set) is taken out of the training data before
            # partitioning, so its clients and the other arm's would not hold the same data.
            raise ScenarioError(f"{source}: {field}: {holder!r} carves a server-held set out of the clients' data, "
                                "so it cannot be paired with another arm; compare it in a sweep instead")
        try:
            check(arm, source)
        except ScenarioError as err:
            raise ScenarioError(f"{err} (in baseline {name!r})") from None


def run_baselines(ctx: RunContext, run_one: Callable[[RunContext], dict[str, Any]]) -> dict[str, Any]:
    """Run (or resume, or skip when complete) each baseline; their final metrics, prefixed."""
    federated = ctx.scenario.federated
    assert federated is not None  # a federated scenario
    final: dict[str, Any] = {}
    for name in federated.baselines:
        scenario = baseline_scenario(ctx.scenario, name)
        metrics = _run_one_baseline(ctx, scenario, name, run_one)
        final.update({f"baselines.{name}.{key}": metrics[key] for key in COMPARED_METRICS if key in metrics})
    return final


def _run_one_baseline(ctx: RunContext, scenario: Scenario, name: str,
                      run_one: Callable[[RunContext], dict[str, Any]]) -> dict[str, Any]:
    path = ctx.run.path / BASELINES_DIR / name
    for folder in (path.parent, path):
        if folder.is_symlink():  # nothing a run reads or removes may lead out of its folder
            raise UserError(f"{folder}: a symbolic link, not the run's own baseline folder; the run folder was "
                            f"altered: remove the link, and 'testbed resume' runs what is missing again")
    if path.is_dir() and not RunFolder(path).config_path.is_file():
        shutil.rmtree(path)  # a crash while the folder was being made: nothing was run in it yet
    if RunFolder(path).config_path.is_file():
        run = RunFolder.open(path)
        if run.completed:
            summary = run.read_summary() or {}
            return dict(summary.get("final_metrics", {}))
        run.lock()
        run.rewind_to_checkpoint()
    else:
        run = RunFolder.create(path, scenario.model_dump(mode="json"))
    try:
        child = RunContext(scenario, run, ctx.engine, ctx.progress.for_arm(f"baseline {name}"), run.append_metrics,
                           ctx.source)
        ctx.engine.start()  # a no-op while Ray runs (`ray_outlives_simulation`); started again after a resume
        started = time.perf_counter()
        final = run_one(child)
        run.write_summary({"name": scenario.name, "kind": scenario.kind, "seed": scenario.seed,
                           "status": "completed", "final_metrics": final, "baseline_of": ctx.scenario.name,
                           "engine": ctx.engine.describe(),
                           "timings": {"wall_s": round(time.perf_counter() - started, 3)}})
    finally:
        run.unlock()
    return final
