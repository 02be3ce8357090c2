"""What the decentralized check keeps for a sweep's next variants (issue 39 item 1: fig2_paper's 35
variants in one validate): a graph whose builder is declared seedless (`topologies.graphs.seedless`)
is built once for every seed, a random one once per seed; the node data are split and partitioned
once per (data block, seed); the walk matrix is hashed once for its plans. What is kept is what the
check would have built again: a refusal keeps its words.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import networkx as nx
import numpy as np
import pytest

from testbed.decentralized import driver, problem, runner
from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.topologies import GRAPH_BUILDERS, graph_from_spec
from tests.decentralized.conftest import TINY

SEEDLESS = {"complete", "ring", "grid", "torus", "hypercube", "exponential", "karate_club", "davis_southern_women",
            "florentine_families", "les_miserables", "edge_list"}
SPECS = {"complete": {"n": 6}, "ring": {"n": 6}, "grid": {"rows": 2, "cols": 3}, "torus": {"rows": 3, "cols": 3},
         "hypercube": {"dim": 3}, "exponential": {"n": 6}, "erdos_renyi": {"n": 12, "p": 0.4},
         "random_geometric": {"n": 12, "radius": 0.6}, "small_world": {"n": 12}}


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
    """Each test starts with the check's caches empty (another test's variants may have filled them)."""
    for name in ("_CHECKED_GRAPHS", "_CHECKED_WALKS", "_CHECKED_PLANS", "_CHECKED_DATA"):
        monkeypatch.setattr(runner, name, {}, raising=False)  # _CHECKED_DATA is new
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})


def _edges(graph: nx.Graph) -> list[tuple[int, int]]:
    return sorted(tuple(sorted(edge)) for edge in graph.edges)


def test_the_builders_declared_seedless_are_those_whose_graph_ignores_the_seed(tmp_path):
    edges = tmp_path / "g.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    declared = {name for name, builder in GRAPH_BUILDERS.items() if getattr(builder, "seedless", False)}
    assert declared == SEEDLESS
    for name in GRAPH_BUILDERS:
        params = {"path": str(edges)} if name == "edge_list" else SPECS.get(name, {})
        graphs = [_edges(graph_from_spec({"name": name, **params}, seed=seed)) for seed in (1, 2, 3)]
        assert (graphs[0] == graphs[1] == graphs[2]) == (name in SEEDLESS), name


def _scenario(seed: int, **decentralized: Any):
    raw = copy.deepcopy(TINY)
    block = cast(dict[str, Any], raw["decentralized"])
    raw["seed"] = seed
    block.update(decentralized)
    return validate_raw(raw, "s.yaml")


def _counted(monkeypatch, module, name: str) -> list[Any]:
    calls: list[Any] = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_seedless_graph_is_built_once_for_every_seed_and_a_random_one_per_seed(monkeypatch):
    builds = _counted(monkeypatch, runner, "build_graph")
    for seed in (0, 1, 2):
        runner.DecentralizedRunner().check(_scenario(seed), "s.yaml")
    assert len(builds) == 1
    builds.clear()
    random = {"topology": {"name": "erdos_renyi", "n": 8, "p": 0.6}}
    for seed in (0, 1, 2, 0):
        runner.DecentralizedRunner().check(_scenario(seed, **random), "s.yaml")
    assert len(builds) == 3
    own_seed = {"topology": {"name": "erdos_renyi", "n": 8, "p": 0.6, "seed": 7}}
    for seed in (0, 1, 2):
        runner.DecentralizedRunner().check(_scenario(seed, **own_seed), "s.yaml")
    assert len(builds) == 4  # the spec's own seed fixes the graph
    assert problem.graph_seed(_scenario(5).decentralized, 5) is None
    assert problem.graph_seed(_scenario(5, **random).decentralized, 5) == 5
    # a variant refused on the kept graph is refused in the words of a fresh one
    raw = copy.deepcopy(TINY)
    raw["seed"], raw["data"]["num_clients"] = 1, 9
    with pytest.raises(ScenarioError, match=r"^s\.yaml: data\.num_clients: 9, but the topology 'hypercube' has 8 "
                                            r"nodes; set data\.num_clients: 8$"):
        runner.DecentralizedRunner().check(validate_raw(raw, "s.yaml"), "s.yaml")
    assert len(builds) == 4


def test_the_node_data_are_checked_once_per_data_and_seed_and_the_walk_hashed_once(monkeypatch):
    checks = _counted(monkeypatch, runner, "check_node_data")
    hashes = _counted(monkeypatch, driver, "walk_digest")
    for seed in (0, 1):
        for sigma in (1.0, 2.0, 3.0):  # variants that differ in their plan, not their data or graph
            runner.DecentralizedRunner().check(_scenario(seed, sigma=sigma), "s.yaml")
    assert len(checks) == 2 and len(hashes) == 1
    # a plan made on the kept walk and its digest is the plan a run makes on its own
    scenario = _scenario(0, sigma=None, privacy={"target_epsilon": 20.0, "delta": 1e-5})
    runner.DecentralizedRunner().check(scenario, "s.yaml")
    config = scenario.decentralized
    assert config is not None
    kept = {key[2]: plan for key, plan in runner._CHECKED_PLANS.items() if key[1] == config.model_dump_json()}
    built = problem.build_problem(scenario.model_dump(mode="json"))
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
    for algorithm in config.algorithms:
        fresh = driver.plan(built, config.phase(algorithm), "s.yaml")
        assert (kept[algorithm].sigma, kept[algorithm].stop) == (fresh.sigma, fresh.stop), algorithm
        assert (kept[algorithm].epsilon == fresh.epsilon).all(), algorithm


# --- the accountants kept on disk for the next command's check ---------------------------------------

ACCOUNTANTS = [("random_walk", "network"), ("random_walk", "local"), ("random_walk", "hitting_time"),
               ("gossip", "network"), ("local_dp", "network")]


@pytest.fixture
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TESTBED_CACHE_DIR", str(tmp_path))
    return tmp_path / "accountants"


def _problem(accounting: str, topology: dict | None = None):
    scenario = _scenario(0, random_walk={"steps": 40, "eval_every": 10, "checkpoint_every": 20,
                                         "accounting": accounting}, **({"topology": topology} if topology else {}))
    return problem.build_problem(scenario.model_dump(mode="json"))


@pytest.mark.parametrize("algorithm,accounting", ACCOUNTANTS)
def test_a_check_reads_back_the_accountant_a_former_command_computed_bit_for_bit(monkeypatch, cache_dir,
                                                                                 algorithm, accounting):
    built = _problem(accounting)
    settings = built.config.phase(algorithm)
    computed = driver.unit_rho(built, settings)  # a run's plan: computes, and keeps it on disk
    run_plan = driver.plan(built, settings, "s.yaml")
    assert len(list(cache_dir.glob("*.npz"))) == 1
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})  # the next command
    monkeypatch.setattr(driver, "_unit_rho", lambda *args: pytest.fail("the kept accountant was computed again"))
    read = driver.unit_rho(built, settings, stored=True)
    for name in ("maximum", "pair", "local"):
        ours, theirs = getattr(read, name), getattr(computed, name)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), name
    assert read.order_limited == computed.order_limited and read.matrix is None
    check_plan = driver.plan(built, settings, "s.yaml", stored=True)
    assert (check_plan.sigma, check_plan.stop) == (run_plan.sigma, run_plan.stop)
    assert np.array_equal(check_plan.epsilon, run_plan.epsilon)


def test_a_run_computes_its_own_accountant_and_a_changed_key_or_entry_is_computed_again(monkeypatch, cache_dir):
    built = _problem("network")
    settings = built.config.phase("random_walk")
    driver.unit_rho(built, settings)
    computed = _counted(monkeypatch, driver, "_unit_rho")
    for stored in (False, True):  # a run never reads the entry; a check does
        monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
        driver.unit_rho(built, settings, stored=stored)
    assert len(computed) == 1
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
    (entry,) = cache_dir.glob("*.npz")
    entry.write_bytes(b"not an npz")  # a damaged entry is computed again, and rewritten
    driver.unit_rho(built, settings, stored=True)
    assert len(computed) == 2 and entry.read_bytes()[:2] == b"PK"
    # the graph's recorded symmetry, which picks the translated computation, is part of the key
    plain = _problem("network", {"name": "edge_list", "path": str(_hypercube_edges(cache_dir.parent))})
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
    driver.unit_rho(plain, settings, stored=True)
    assert len(computed) == 3 and len(list(cache_dir.glob("*.npz"))) == 2
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
    monkeypatch.setenv("TESTBED_ACCOUNTANT_CACHE", "off")
    driver.unit_rho(built, settings, stored=True)
    assert len(computed) == 4


def _hypercube_edges(folder) -> Any:
    """The 8-node hypercube as an edge list: the same walk matrix, no recorded symmetry."""
    path = folder / "cube.txt"
    path.write_text("".join(f"{u} {u ^ (1 << k)}\n" for u in range(8) for k in range(3) if u < u ^ (1 << k)))
    return path


def test_an_edit_of_the_accountants_code_is_a_new_key(monkeypatch, cache_dir):
    """The entry is keyed by the source it was computed with: after an edit the check computes again."""
    from testbed.decentralized import accountant_cache

    built = _problem("network")
    settings = built.config.phase("random_walk")
    driver.unit_rho(built, settings)
    computed = _counted(monkeypatch, driver, "_unit_rho")
    monkeypatch.setattr(driver, "_UNIT_RHO_CACHE", {})
    monkeypatch.setattr(accountant_cache, "_code", lambda: "an edited testbed/decentralized")

    driver.unit_rho(built, settings, stored=True)

    assert len(computed) == 1 and len(list(cache_dir.glob("*.npz"))) == 2
