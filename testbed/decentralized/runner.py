"""``kind: decentralized``: private learning on a graph, with pairwise network-DP accounting and audit.

Where the nodes run follows the engine's capabilities (`testbed.decentralized.driver.nodes_backend`):
on an engine with ``spmd`` (mpi) every rank hosts a block of nodes; with ``actors`` (ray, or local
with ``use_ray: always``) actors host them; otherwise they run vectorised through `Engine.call` in
one process. The driver alone writes the run folder. See `testbed.decentralized.driver` for the
order of a run.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from testbed.decentralized import comparison, driver
from testbed.decentralized.config import BASELINE
from testbed.decentralized.privacy import PrivacyPlan
from testbed.decentralized.problem import Problem, build_graph, build_problem, check_node_data, graph_seed
from testbed.errors import ScenarioError, UserError
from testbed.runner import RunContext, Runner
from testbed.scenario import Scenario
from testbed.topologies import TopologyError, metropolis_hastings

if TYPE_CHECKING:
    from testbed.report.audit_page import Finding
    from testbed.report.render import RunData

MAX_AUDIT_NODES = 512  # the attackers' tables grow as steps x n


class DecentralizedRunner(Runner):
    """Random-walk DP-SGD, Muffliato gossip and local DP over a networkx graph."""

    kind = "decentralized"
    needs_one_of = frozenset({"tasks", "spmd"})

    def audit_findings(self, data: RunData) -> list[Finding]:
        from testbed.decentralized.findings import decentralized_findings

        return decentralized_findings(data)

    def check(self, scenario: Scenario, source: str) -> None:
        config = scenario.decentralized
        if config is None:
            raise ScenarioError(f"{source}: decentralized: required for kind 'decentralized' "
                                "(e.g. decentralized: {topology: {name: ring, n: 8}, sigma: 1.0})")
        try:
            graph = _checked_graph(config, scenario.seed)
        except TopologyError as err:
            raise ScenarioError(f"{source}: decentralized.topology: {err}") from None
        for index, spec in enumerate(config.comparison.topologies):
            try:
                _checked_graph(config, scenario.seed, spec.spec)
            except TopologyError as err:
                raise ScenarioError(f"{source}: decentralized.comparison.topologies.{index}: {err}") from None
        if config.train:
            _check_training(scenario, source, graph)

    def run(self, ctx: RunContext) -> dict[str, Any]:
        scenario, source = ctx.scenario, ctx.source or str(ctx.run.config_path)
        config, data = scenario.decentralized, scenario.model_dump(mode="json")
        assert config is not None  # DecentralizedRunner.check requires the block
        problem = build_problem(data)
        plans = {alg: driver.plan(problem, config.phase(alg), source) for alg in config.algorithms}
        checkpoint = ctx.run.latest_checkpoint()
        saved = driver.unpack(checkpoint["progress"]) if checkpoint else {"phase": None, "done": {}}
        if config.comparison.enabled and "comparison" not in saved:
            saved["comparison"] = self._comparison(ctx, data, config)
            ctx.run.save_checkpoint(0, {"progress": driver.pack(saved)})
        if config.algorithms:
            self._train_all(ctx, problem, plans, saved, data)
        ctx.run.write_artifacts(_artifacts(saved))
        numbers = {f"{alg}.{k}": v for alg, result in saved["done"].items() for k, v in result["numbers"].items()}
        return {**numbers, **_comparison_numbers(saved, config)}

    def _train_all(self, ctx: RunContext, problem, plans: dict, saved: dict, data: dict) -> None:
        """Each algorithm in turn on the engine's nodes backend, then (opted in) each again with no
        noise; checkpoint names keep growing across all of them."""
        offset = 1
        with driver.nodes_backend(ctx.engine, data, problem.n) as run_chunk:
            for name, algorithm, plan in _phases(problem.config, plans):
                if name not in saved["done"]:
                    self._train(ctx, problem, name, algorithm, plan, saved, offset, run_chunk)
                offset += problem.config.phase(algorithm).steps + 1

    def _comparison(self, ctx: RunContext, data: dict, config) -> dict:
        count = max(1, len(config.comparison.topologies))
        results = {}
        with ctx.progress.task("epsilon by distance", total=count) as advance:
            for index in range(count):  # accounting only: one call each (in the driver without ``tasks``)
                results[str(index)] = ctx.engine.call(driver.comparison_arrays, data, index)
                advance(1)
        return results

    def _train(self, ctx: RunContext, problem, name: str, algorithm: str, plan, saved: dict, offset: int,
               run_chunk) -> None:
        """One phase (an algorithm, or its noise-free arm when ``plan`` is None) from its start or its
        checkpoint to its end, then its results."""
        settings = problem.config.phase(algorithm)
        args = driver.phase_args(settings, plan) if plan is not None else driver.baseline_args(settings)
        if saved["phase"] == name:
            state, step = saved["state"], saved["step"]
        else:
            state, step = driver.initial_state(problem, args), 0
            ctx.log_metrics(driver.record(name, {"step": 0, **driver.evaluate(problem, args, state)}, plan))
        with ctx.progress.task(name, total=args.stop, completed=step) as advance:
            while step < args.stop:
                stop = min((step // settings.checkpoint_every + 1) * settings.checkpoint_every, args.stop)
                state, records = run_chunk(args, state, step, stop)
                _check_finite(ctx, problem.config, algorithm, records, state, stop)  # before it is checkpointed
                for metrics in records:
                    ctx.log_metrics(driver.record(name, metrics, plan))
                saved.update(phase=name, step=stop, state=state)
                ctx.run.save_checkpoint(offset + stop, {"progress": driver.pack(saved)})
                advance(stop - step)
                step = stop
        if plan is not None:
            result = driver.finish(problem, settings, plan, state)
        else:
            result = driver.finish_baseline(problem, args, state)
        saved.update(phase=None, step=0, state=None)
        saved["done"][name] = result
        ctx.run.save_checkpoint(offset + settings.steps + 1, {"progress": driver.pack(saved)})


def _check_finite(ctx: RunContext, config, algorithm: str, records: list[dict], state: dict, stop: int) -> None:
    """Stop a phase whose models became infinite or NaN after the chunk that ends at step ``stop`` (a
    step size too large): every later step would be wasted on NaNs. Names the step of the first
    non-finite loss and the first node whose model is non-finite; the checkpoints written so far are
    from before it."""
    bad = next(((metrics["step"], key, value) for metrics in records for key, value in metrics.items()
                if "loss" in key and isinstance(value, float) and not math.isfinite(value)), None)
    models = state.get("params", state.get("token"))
    rows = models.reshape(-1, models.shape[-1]) if models is not None else None
    broken = [] if rows is None else (~rows.isfinite().all(dim=1)).nonzero().flatten().tolist()
    if bad is None and not broken:
        return
    what = [f"at step {bad[0]} ({bad[1]} = {bad[2]})" if bad is not None else f"by step {stop}"]
    if broken and rows is not None and len(rows) > 1:
        what.append(f"on node {broken[0]}, whose model is not finite")
    field = f"decentralized.{algorithm}.lr" if getattr(config, algorithm).lr is not None else "decentralized.lr"
    run = ctx.run
    kept = (f"; the checkpoints up to step {run.latest_step} in {run.path} are from before it"
            if run.has_checkpoint else "")
    raise UserError(f"{ctx.source or run.config_path}: {field}: {algorithm} diverged {' '.join(what)}; "
                    f"lower the step size{kept}")


def _phases(config, plans: dict) -> list[tuple[str, str, PrivacyPlan | None]]:
    """(phase name, algorithm, privacy plan) in training order: the private algorithms, then their
    noise-free arms (plan None) when ``privacy.non_private_baseline`` asks for them."""
    phases: list[tuple[str, str, PrivacyPlan | None]] = [(alg, alg, plans[alg]) for alg in config.algorithms]
    if config.privacy.non_private_baseline:
        phases += [(f"{BASELINE}.{alg}", alg, None) for alg in config.algorithms]
    return phases


# The graphs the check built last, by (topology, root seed; no seed for a graph that depends on none,
# `graph_seed`), each with its digest (its nodes and edges), and the walk matrix of the last distinct
# graph, by digest: the variants of a sweep that share them build them once (a grid of 5 seeds over a
# 2048-node hypercube builds one graph, 0.06 s, and one 32 MB matrix, not one of each per variant).
# A plan depends on the graph and the decentralized block only (never the root seed): the plans
# checked last are kept by (graph digest, block, algorithm), so a seed grid plans each variant once.
# Read only: the check neither changes a graph nor keeps a problem.
_CHECKED_GRAPHS: dict[tuple[str, int | None], tuple[nx.Graph, list[str]]] = {}
_CHECKED_WALKS: dict[str, tuple[np.ndarray, str]] = {}  # with the walk's own digest, the accountant's key
_CHECKED_PLANS: dict[tuple[str, str, str], object] = {}
# The node data checked last, by (data block, root seed), all it depends on: a sweep's variants that
# differ elsewhere (the accounting, sigma, the steps) split and partition the labels once.
_CHECKED_DATA: dict[tuple[str, int], bool] = {}
_CHECKED_GRAPHS_SIZE, _CHECKED_WALKS_SIZE, _CHECKED_PLANS_SIZE, _CHECKED_DATA_SIZE = 10, 1, 16, 16


def _remember(cache: dict, size: int, key, value):
    while len(cache) >= size:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


def _checked_graph(config, seed: int, spec: dict | None = None) -> nx.Graph:
    """The scenario's topology (or ``spec``, a compared one) as `build_graph` builds it (kept for the
    next variants; a sweep's base and its variants validate the same comparison graphs)."""
    return _checked_entry(config, seed, spec)[0]


def _checked_entry(config, seed: int, spec: dict | None = None) -> tuple[nx.Graph, list[str]]:
    key = (json.dumps(spec or config.topology.spec, sort_keys=True, default=str), graph_seed(config, int(seed), spec))
    found = _CHECKED_GRAPHS.get(key)
    return found if found is not None else _remember(_CHECKED_GRAPHS, _CHECKED_GRAPHS_SIZE, key,
                                                     (build_graph(config, seed, spec), []))


def _checked_walk(config, seed: int) -> tuple[str, np.ndarray, str]:
    """The scenario's graph's digest, its Metropolis-Hastings matrix (`build_problem`'s; it depends
    on the nodes' order and the edges alone) and the matrix's `driver.walk_digest`, kept for the next
    variants on the same graph (each digest is 10-20 ms at 2048 nodes: once per graph)."""
    graph, digest = _checked_entry(config, seed)
    if not digest:
        digest.append(hashlib.sha256(repr((list(graph.nodes), list(graph.edges))).encode()).hexdigest())
    found = _CHECKED_WALKS.get(digest[0])
    if found is None:
        walk = metropolis_hastings(graph)
        found = _remember(_CHECKED_WALKS, _CHECKED_WALKS_SIZE, digest[0], (walk, driver.walk_digest(walk)))
    return digest[0], *found


def _check_training(scenario: Scenario, source: str, graph: nx.Graph) -> None:
    """What training needs: one data shard per graph node, a valid audit source, enough nodes."""
    n = graph.number_of_nodes()
    config = scenario.decentralized
    assert config is not None  # DecentralizedRunner.check requires the block
    if scenario.data.replicate != 1:  # each node's shard is its own data, never repeated
        raise ScenarioError(f"{source}: data.replicate: {scenario.data.replicate} copies are not made by kind "
                            "'decentralized' (each node trains on its own shard); remove it")
    if scenario.data.num_clients != n:
        raise ScenarioError(f"{source}: data.num_clients: {scenario.data.num_clients}, but the topology "
                            f"'{config.topology.name}' has {n} nodes; set data.num_clients: {n}")
    if config.audit.canaries and config.audit.source >= n:
        raise ScenarioError(f"{source}: decentralized.audit.source: node {config.audit.source} is not in 0..{n - 1}")
    if config.audit.canaries and n > MAX_AUDIT_NODES:
        raise ScenarioError(f"{source}: decentralized.audit.canaries: the audit supports graphs of up to "
                            f"{MAX_AUDIT_NODES} nodes (this one has {n})")
    scenario.engine.check(n, "nodes", source)
    try:  # the nodes' data on its labels (no data loaded, no torch); the plans need only the graph and walk
        data_key = (scenario.data.model_dump_json(), scenario.seed)
        if data_key not in _CHECKED_DATA:  # refused data raises: never kept
            check_node_data(scenario)
            _remember(_CHECKED_DATA, _CHECKED_DATA_SIZE, data_key, True)
        graph_key, walk, walk_key = _checked_walk(config, scenario.seed)
        problem = Problem(scenario.seed, config, graph, walk, None, None, None, None)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None
    block = config.model_dump_json()
    for algorithm in config.algorithms:  # the run plans each algorithm's noise and stopping step first
        if (graph_key, block, algorithm) not in _CHECKED_PLANS:  # a refused plan raises: never kept
            _remember(_CHECKED_PLANS, _CHECKED_PLANS_SIZE, (graph_key, block, algorithm),
                      driver.plan(problem, config.phase(algorithm), source, digest=walk_key, stored=True))


def _comparison_numbers(saved: dict, config) -> dict[str, float]:
    """``comparison.<index>.<topology name>.<number>`` for each compared topology: the scalars of
    `comparison.final_numbers` (walk-below-gossip share, crossover distance with its sentinel
    ``max_distance + 1`` when gossip never overtakes, mean losses at distance 1)."""
    specs = config.comparison.topologies
    numbers = {}
    for index, result in saved.get("comparison", {}).items():
        name = specs[int(index)].name if specs else config.topology.name
        numbers.update({f"comparison.{index}.{name}.{k}": v for k, v in comparison.final_numbers(result).items()})
    return numbers


def _artifacts(saved: dict) -> dict:
    """Everything the privacy report plots, flattened to ``<algorithm>.<array>`` keys."""
    arrays = {}
    for index, result in saved.get("comparison", {}).items():
        arrays.update({f"comparison.{index}.{k}": v for k, v in result.items()})
    for algorithm, result in saved["done"].items():
        arrays.update({f"{algorithm}.{k}": v for k, v in result["arrays"].items()})
    return arrays
