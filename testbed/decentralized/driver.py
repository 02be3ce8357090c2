"""The driver of a decentralized run: privacy plans, training in checkpointed chunks, results.

Order of a run: (1) plan every algorithm's privacy (sigma calibrated from the target when unset,
and the last step whose largest pairwise epsilon stays within the target) before anything is
written, so an unreachable target fails as a user error with no run folder; (2) the Fig.-1
comparison (accounting only); (3) each algorithm in turn, chunk by chunk on the chosen nodes
backend, a checkpoint after every chunk; (4) its final pairwise epsilon matrix, its epsilon by
distance and the canary audit; (5) with ``privacy.non_private_baseline``, each algorithm again
with no noise (`baseline_args`), evaluated only. The checkpoint holds all of it, so a resumed run redoes nothing.

The plans import no torch (`testbed validate` runs `plan`); training imports it where it runs.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import networkx as nx
import numpy as np

from testbed.decentralized import accountant_cache, audit, comparison, privacy
from testbed.decentralized.config import DecentralizedConfig, PhaseSettings
from testbed.decentralized.phase import PhaseArgs, build_phase, structure
from testbed.decentralized.problem import Problem, build_graph
from testbed.engines.base import Engine
from testbed.errors import ScenarioError
from testbed.scenario import Scenario
from testbed.seeding import SeedTree, stream
from testbed.topologies import epsilon_by_distance
from testbed.topologies.symmetry import GROUP_KEY, row_symmetry


def sensitivity(config: DecentralizedConfig) -> float:
    """Sensitivity of a node's release in units of the clip C: C (add/remove) or 2C (replace)."""
    return 1.0 if config.privacy.neighbouring == "add_remove" else 2.0


# The last accountant results of this process, keyed by everything they depend on. A sweep over
# seeds on a fixed graph (a hypercube) asks for the same one per variant, when validating and when
# running in one process: at 512 nodes and 5000 walk steps each costs about a minute.
_UNIT_RHO_CACHE: dict[tuple, privacy.UnitRho] = {}
_UNIT_RHO_CACHE_SIZE = 2


def walk_digest(walk: np.ndarray) -> str:
    """The key of a walk matrix in the accountant's cache: a SHA-256 of its entries."""
    return hashlib.sha256(np.ascontiguousarray(walk).data).hexdigest()  # its buffer: no 32 MB copy


def unit_rho(problem: Problem, settings: PhaseSettings, keep: int | None = None, *,
             digest: str | None = None, stored: bool = False) -> privacy.UnitRho:
    """The accountant of ``settings.algorithm`` at sigma = 1 over its planned steps (cached).
    ``digest``: the walk's `walk_digest`, where the caller keeps it (a check's variants share one walk).
    ``stored``: a check's plan, which may read the accountant a former command kept on disk
    (`accountant_cache`); a run's plan computes its own, and keeps it there for the next check."""
    config, walk = problem.config, problem.walk
    key = (digest or walk_digest(walk), walk.shape, settings.algorithm,
           settings.steps, structure(config, walk, settings.steps), sensitivity(config),
           config.random_walk.accounting, keep)
    lasting = (*key, problem.graph.graph.get(GROUP_KEY))  # the recorded symmetry picks the computation
    if key not in _UNIT_RHO_CACHE:
        found = accountant_cache.read(lasting, settings.steps) if stored and keep is None else None
        if found is not None:
            return found  # not kept in memory: a run in this process computes its own
        while len(_UNIT_RHO_CACHE) >= _UNIT_RHO_CACHE_SIZE:
            _UNIT_RHO_CACHE.pop(next(iter(_UNIT_RHO_CACHE)))
        _UNIT_RHO_CACHE[key] = _unit_rho(problem, settings, keep)
        if keep is None:
            accountant_cache.write(lasting, _UNIT_RHO_CACHE[key])
    return copy.deepcopy(_UNIT_RHO_CACHE[key])  # callers own their copy


def _unit_rho(problem: Problem, settings: PhaseSettings, keep: int | None) -> privacy.UnitRho:
    config, walk, planned = problem.config, problem.walk, settings.steps
    cap, rounds, gamma = structure(config, walk, planned)
    delta_c = sensitivity(config)
    if settings.algorithm == "random_walk" and config.random_walk.accounting == "local":
        return privacy.walk_local_unit_rho(problem.n, planned, cap, delta_c, keep)
    if settings.algorithm == "random_walk" and config.random_walk.accounting == "hitting_time":
        return privacy.walk_first_hit_unit_rho(walk, planned, cap, delta_c, keep)
    if settings.algorithm == "random_walk":
        return privacy.walk_unit_rho(walk, planned, cap, delta_c, keep, row_symmetry(problem.graph, walk))
    if settings.algorithm == "gossip":
        return privacy.gossip_unit_rho(walk, planned, rounds, gamma, delta_c, keep)
    return privacy.local_dp_unit_rho(problem.n, planned, delta_c, keep)


def plan(problem: Problem, settings: PhaseSettings, source: str, *, digest: str | None = None,
         stored: bool = False) -> privacy.PrivacyPlan:
    """The privacy plan of one algorithm (sigma, stopping step); a `ScenarioError` if impossible.
    ``digest`` and ``stored``: as `unit_rho` takes them (a check's plan)."""
    config = problem.config
    _check_accountant_cost(problem, settings, source)
    try:
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # an extreme sigma: refused below
            unit = unit_rho(problem, settings, digest=digest, stored=stored)
            return privacy.make_plan(settings.algorithm, unit, settings.steps, config.sigma,
                                     config.privacy.target_epsilon, config.privacy.delta, config.privacy.conversion,
                                     sensitivity(config))
    except ValueError as err:
        message = str(err)
        if message.startswith("privacy."):
            raise ScenarioError(f"{source}: decentralized.{message}") from None
        field = "decentralized.sigma" if config.sigma is not None else "decentralized.privacy.target_epsilon"
        raise ScenarioError(f"{source}: {field}: no privacy plan for {settings.algorithm} ({message})") from None


def _check_accountant_cost(problem: Problem, settings: PhaseSettings, source: str) -> None:
    """Refuse, before anything is allocated, an accountant too large for this machine (`privacy.accountant_cost`)."""
    config, walk, algorithm = problem.config, problem.walk, settings.algorithm
    accounting = config.random_walk.accounting
    translated = (algorithm == "random_walk" and accounting == "network"
                  and row_symmetry(problem.graph, walk) is not None)
    rounds = structure(config, walk, settings.steps)[1] if algorithm == "gossip" else 1
    error = privacy.accountant_cost_error(algorithm, accounting, problem.n, problem.graph.number_of_edges(),
                                          settings.steps, rounds, translated)
    if error is not None:
        raise ScenarioError(f"{source}: {config.steps_field(algorithm)}: {error}")


def phase_args(settings: PhaseSettings, the_plan: privacy.PrivacyPlan) -> PhaseArgs:
    return PhaseArgs(settings.algorithm, settings.lr, the_plan.sigma, the_plan.stop, settings.steps,
                     settings.eval_every)


def baseline_args(settings: PhaseSettings) -> PhaseArgs:
    """The noise-free arm of an algorithm: sigma 0, every planned step (no budget stops it)."""
    return PhaseArgs(settings.algorithm, settings.lr, 0.0, settings.steps, settings.steps, settings.eval_every)


def record(name: str, metrics: dict[str, Any], the_plan: privacy.PrivacyPlan | None) -> dict[str, Any]:
    """A metrics.jsonl record: the step, and the phase's metrics and epsilon (none for a noise-free
    arm, ``the_plan`` None), prefixed by the phase's name."""
    step = metrics["step"]
    values = {f"{name}.{k}": v for k, v in metrics.items() if k != "step"}
    if the_plan is not None:
        values[f"{name}.epsilon"] = float(the_plan.epsilon[step])
    return {"step": step, "algorithm": name, **values}


TRIAL = stream("comparison.{}.{}", "the root seed of one trial graph of a comparison topology")


def comparison_arrays(scenario_data: dict, index: int) -> dict[str, np.ndarray]:
    """Fig.-1 profiles of comparison topology ``index`` (the run's topology when none is listed).
    An engine task: it rebuilds the run's seed tree from the scenario's root seed."""
    scenario = Scenario.model_validate(scenario_data)
    config, seeds = scenario.decentralized, SeedTree(scenario.seed, strict=True)
    assert config is not None  # DecentralizedRunner.check requires the block
    specs = config.comparison.topologies
    spec = specs[index].spec if specs else config.topology.spec
    trials = 1 if "seed" in spec else config.comparison.trials
    graphs = []
    for trial in range(trials):
        # Trial 0 of the run's own topology is the very graph the run trains on.
        seed = scenario.seed if (not specs and trial == 0) else seeds.integer(TRIAL.path.format(index, trial))
        graphs.append(build_graph(config, seed, spec))
    result = comparison.profiles(graphs, config.comparison)
    label = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "name")
    result["name"] = np.array([f"{spec['name']} ({label})" if label else spec["name"]])
    return result


def finish(problem: Problem, settings: PhaseSettings, the_plan: privacy.PrivacyPlan, state: dict) -> dict[str, Any]:
    """Final arrays and numbers of one algorithm: pairwise epsilon, its distance profile, audit."""
    from testbed.decentralized import steps

    config = problem.config
    stop, n = the_plan.stop, problem.n
    if stop > 0:
        unit = unit_rho(problem, settings, keep=stop)
        assert unit.matrix is not None  # kept at step ``stop``
        eps = privacy.to_epsilon(unit.matrix, unit.local[stop], the_plan.sigma, config.privacy.delta,
                                 config.privacy.conversion, unit.order_limited, sensitivity(config))
        eps = np.broadcast_to(eps, (n, n)).copy()
    else:
        eps = np.zeros((n, n))
    np.fill_diagonal(eps, 0.0)
    profile = epsilon_by_distance(eps, problem.graph)
    args = phase_args(settings, the_plan)
    phase = build_phase(problem, args)
    arrays = {"pairwise_epsilon": eps, "epsilon_curve": the_plan.epsilon, "distance": profile.distance,
              "distance_mean": profile.mean, "distance_min": profile.minimum, "distance_max": profile.maximum}
    numbers = {**the_plan.summary(), "epsilon_mean": float(eps[~np.eye(n, dtype=bool)].mean()),
               **steps.evaluate(problem, phase, state)}
    # Under calibrated noise a step size that is too large for the noise ends worse than it started:
    # the report and the summary say so instead of showing a diverged arm as a result.
    numbers["initial_test_loss"] = steps.evaluate(problem, phase, steps.initial_state(problem, phase))["test_loss"]
    numbers["loss_above_start"] = float(numbers["test_loss"] > numbers["initial_test_loss"])
    if phase.canaries:
        audit_arrays = audit_pairs(problem, phase, state, eps)
        arrays.update({f"audit_{k}": v for k, v in audit_arrays.items()})
        numbers["audit_max_lower"] = float(audit_arrays["lower"].max())
        # The most this draw of canaries lets any attacker certify: the report's measure of whether a
        # lower bound far below the accountant's epsilon says "loose accountant" or "weak audit".
        numbers["audit_power"] = audit.audit_power(phase.canaries, config.privacy.delta, config.audit.significance,
                                                   int(phase.inclusion.sum()))
    return {"arrays": arrays, "numbers": numbers}


def finish_baseline(problem: Problem, args: PhaseArgs, state: dict) -> dict[str, Any]:
    """Final numbers of a noise-free arm: its evaluation only (no accountant, no audit)."""
    return {"arrays": {}, "numbers": evaluate(problem, args, state)}


def audit_pairs(problem: Problem, phase, state: dict, eps: np.ndarray) -> dict[str, np.ndarray]:
    """Empirical lower bound for every pair (source, v) beside the accountant's upper bound."""
    config, source = problem.config, phase.source
    scores = state["attack_score"].numpy()
    observers = np.array([v for v in range(problem.n) if v != source])
    hops = nx.single_source_shortest_path_length(problem.graph, source)
    lower = [audit.epsilon_lower_bound(scores if scores.ndim == 1 else scores[v], phase.inclusion.numpy(),
                                       config.privacy.delta, config.audit.significance) for v in observers]
    return {"observer": observers, "distance": np.array([hops[v] for v in observers]),
            "lower": np.array(lower), "upper": eps[source, observers]}


@contextmanager
def nodes_backend(engine: Engine, scenario_data: dict, n: int) -> Iterator[Any]:
    """Where the nodes run, by what the engine offers: ranks that each host a block of nodes
    (``spmd``), actors that each host a block (``actors``), or one call per chunk that runs all
    nodes vectorised (``tasks``). All three compute the same numbers (tests/decentralized)."""
    if engine.offers("spmd"):
        from testbed.decentralized.spmd_nodes import spmd_chunk

        yield lambda args, state, start, stop: engine.spmd(spmd_chunk, scenario_data, args, state, start, stop)
    elif engine.offers("actors"):
        from testbed.decentralized.hosted_nodes import HostedNodes

        with HostedNodes(engine, scenario_data, n) as hosts:
            yield hosts.run_chunk
    else:
        from testbed.decentralized.backends import local_chunk

        yield lambda args, state, start, stop: engine.call(local_chunk, scenario_data, args, state, start, stop)


def initial_state(problem: Problem, args: PhaseArgs) -> dict:
    from testbed.decentralized import steps

    return steps.initial_state(problem, build_phase(problem, args))


def evaluate(problem: Problem, args: PhaseArgs, state: dict) -> dict[str, float]:
    from testbed.decentralized import steps

    return steps.evaluate(problem, build_phase(problem, args), state)


def pack(saved: dict) -> dict:
    """The run's progress as a checkpoint payload: torch's weights-only loader takes tensors, lists
    and numbers, not numpy arrays, so the result arrays become tensors (strings become lists)."""
    return {**saved, "done": _convert(saved["done"], _to_torch),
            **({"comparison": _convert(saved["comparison"], _to_torch)} if "comparison" in saved else {})}


def unpack(payload: dict) -> dict:
    """Inverse of `pack`."""
    return {**payload, "done": _convert(payload["done"], _to_numpy),
            **({"comparison": _convert(payload["comparison"], _to_numpy)} if "comparison" in payload else {})}


def _convert(value: Any, leaf) -> Any:
    return {k: _convert(v, leaf) for k, v in value.items()} if isinstance(value, dict) else leaf(value)


def _to_torch(value: Any) -> Any:
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value)) if value.dtype.kind in "biuf" else value.tolist()
    return value


def _to_numpy(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numpy()
    return np.array(value) if isinstance(value, list) else value
