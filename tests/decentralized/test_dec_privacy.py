"""Pairwise accounting of the training runs, the privacy target and sigma calibration.

References: the `topologies` accountants (R1 random walk, M1 gossip), a loop over matrix powers for
the multi-iteration gossip bound, and opacus' RDP accountant for local DP.
"""

import numpy as np
import pytest
from opacus.accountants import RDPAccountant

from testbed.decentralized.audit import message_polynomials
from testbed.decentralized.phase import chebyshev_momentum
from testbed.decentralized.privacy import (
    gossip_unit_rho,
    local_dp_unit_rho,
    make_plan,
    to_epsilon,
    walk_first_hit_unit_rho,
    walk_local_unit_rho,
    walk_unit_rho,
)
from testbed.topologies import (
    build_graph,
    gossip_pndp,
    metropolis_hastings,
    random_walk_first_hit_sum,
    random_walk_pndp,
)
from testbed.topologies.symmetry import full_matrix, row_symmetry

OFF = ~np.eye(16, dtype=bool)


def _walk(name="hypercube", **params):
    params = params or {"dim": 4}
    return metropolis_hastings(build_graph(name, **params))


def test_walk_rho_at_the_end_is_the_capped_finite_sum_of_topologies():
    w = _walk()

    unit = walk_unit_rho(w, steps=120, cap=9, sensitivity=1.0, keep=120)

    reference = random_walk_pndp(w, T=120, sigma=1.0, alpha=3.0, contributions=9, method="finite_sum") / 3.0
    np.testing.assert_allclose(unit.matrix[OFF], reference[OFF], rtol=1e-12)
    assert unit.maximum[120] == pytest.approx(reference.max(), rel=1e-12)


def test_walk_rho_grows_with_steps_and_counts_at_most_t_contributions():
    w = _walk()

    unit = walk_unit_rho(w, steps=30, cap=5, sensitivity=2.0)

    assert np.all(np.diff(unit.maximum) >= 0)
    np.testing.assert_allclose(unit.local, np.minimum(np.arange(31), 5) * 4.0 / 2.0)
    first = w[~np.eye(16, dtype=bool)].max()  # one contribution, one hop: Delta^2 W[u, v]
    assert unit.maximum[1] == pytest.approx(4.0 * first)


def test_gossip_one_iteration_is_the_muffliato_bound_of_topologies():
    w = _walk()

    unit = gossip_unit_rho(w, steps=1, rounds=6, gamma=1.0, sensitivity=1.0, keep=1)

    reference = gossip_pndp(w, rounds=6, sigma=1.0, alpha=2.0, first_power=0) / 2.0
    np.testing.assert_allclose(unit.matrix[OFF], reference[OFF], rtol=1e-12)


def test_gossip_iterations_sum_every_contribution_message_pair():
    # Reference: the corrected Muffliato-GD form with one round per iteration (R = 1), by loops:
    # rho = 1/2 sum_{s<K} (K - s) sum_{w in N(v)} (W^s)[w,u]^2 / ||W^s[w]||^2
    graph = build_graph("ring", n=7)
    w, K = metropolis_hastings(graph), 5
    reference = np.zeros((7, 7))
    for s in range(K):
        power = np.linalg.matrix_power(w, s)
        for u in range(7):
            for v in range(7):
                for sender in graph.neighbors(v):
                    reference[u, v] += (K - s) * power[sender, u] ** 2 / (power[sender] @ power[sender])
    reference /= 2.0

    unit = gossip_unit_rho(w, steps=K, rounds=1, gamma=1.0, sensitivity=1.0, keep=K)

    off = ~np.eye(7, dtype=bool)
    np.testing.assert_allclose(unit.matrix[off], reference[off], rtol=1e-12)


def test_chebyshev_polynomials_follow_the_recurrence_and_mix_faster():
    w = _walk("ring", n=24)
    gamma = chebyshev_momentum(w)
    explicit = [np.eye(24), w.copy()]
    for _ in range(38):
        explicit.append(gamma * w @ explicit[-1] + (1 - gamma) * explicit[-2])

    ours = list(message_polynomials(w, 40, gamma))

    for mine, theirs in zip(ours, explicit):
        np.testing.assert_allclose(mine, theirs, atol=1e-12)
    consensus = np.full((24, 24), 1 / 24)
    plain = np.linalg.matrix_power(w, 39)
    assert 1 < gamma < 2
    assert np.abs(ours[-1] - consensus).max() < 0.5 * np.abs(plain - consensus).max()


@pytest.mark.parametrize("sigma", [0.8, 2.0])
def test_local_dp_epsilon_matches_opacus_rdp_accountant(sigma):
    accountant = RDPAccountant()
    for _ in range(7):
        accountant.step(noise_multiplier=sigma, sample_rate=1.0)
    unit = local_dp_unit_rho(5, steps=7, sensitivity=1.0)

    ours = to_epsilon(unit.maximum[7], unit.local[7], sigma, 1e-5, "balle", False, 1.0)

    theirs = accountant.get_epsilon(delta=1e-5)
    assert ours <= theirs + 1e-9  # continuous order optimum vs opacus' order grid
    assert ours == pytest.approx(theirs, rel=5e-3)


def test_target_stops_before_any_pair_exceeds_it_and_names_the_pair():
    unit = walk_unit_rho(_walk(), steps=200, cap=16, sensitivity=1.0)

    plan = make_plan("random_walk", unit, 200, sigma=3.0, target=1.5, delta=1e-5, conversion="balle", sensitivity=1.0)

    assert 0 < plan.stop < 200
    assert plan.epsilon[plan.stop] <= 1.5 < plan.epsilon[plan.stop + 1]
    assert plan.exceeded["step"] == plan.stop + 1
    u, v = plan.exceeded["u"], plan.exceeded["v"]
    assert u != v and unit.maximum[plan.stop + 1] == pytest.approx(walk_unit_rho(
        _walk(), steps=200, cap=16, sensitivity=1.0, keep=plan.stop + 1).matrix[u, v])


@pytest.mark.parametrize("algorithm", ["random_walk", "gossip", "local_dp"])
def test_calibrated_sigma_ends_the_planned_run_at_the_target(algorithm):
    w = _walk()
    unit = {"random_walk": lambda: walk_unit_rho(w, 100, 8, 1.0),
            "gossip": lambda: gossip_unit_rho(w, 100, 3, 1.0, 1.0),
            "local_dp": lambda: local_dp_unit_rho(16, 100, 1.0)}[algorithm]()

    plan = make_plan(algorithm, unit, 100, sigma=None, target=4.0, delta=1e-6, conversion="balle", sensitivity=1.0)

    assert plan.calibrated and plan.stop == 100 and not plan.exceeded
    assert plan.epsilon[100] <= 4.0
    assert plan.epsilon[100] == pytest.approx(4.0, rel=1e-6)


def test_the_walk_accounted_as_local_dp_composes_each_nodes_capped_releases():
    unit = walk_local_unit_rho(16, steps=40, cap=3, sensitivity=2.0, keep=40)

    np.testing.assert_allclose(unit.maximum, np.minimum(np.arange(41), 3) * 4.0 / 2.0)
    assert unit.matrix is not None and np.all(unit.matrix[OFF] == 6.0)
    # Above the network accounting of the same walk at every step: amplification only lowers it.
    network = walk_unit_rho(_walk(), steps=40, cap=3, sensitivity=2.0)
    assert np.all(network.maximum[1:] < unit.maximum[1:])


def test_the_first_hit_walk_rho_is_the_capped_first_hit_sum_and_below_the_visit_rho():
    w = metropolis_hastings(build_graph("davis_southern_women"))  # not vertex-transitive
    unit = walk_first_hit_unit_rho(w, steps=60, cap=5, sensitivity=2.0, keep=60)
    expected = 5 * 4.0 * random_walk_first_hit_sum(w, 60)
    off = ~np.eye(w.shape[0], dtype=bool)
    assert unit.matrix is not None
    np.testing.assert_allclose(unit.matrix[off], expected[off], rtol=1e-12)
    network = walk_unit_rho(w, steps=60, cap=5, sensitivity=2.0)
    assert np.all(unit.maximum <= network.maximum + 1e-12) and unit.maximum[-1] < 0.9 * network.maximum[-1]


@pytest.mark.slow
def test_a_walk_needs_more_noise_with_local_and_less_with_hitting_time_accounting(cli, tmp_path, tiny_scenario):
    import json

    import yaml

    sigmas = {}
    for accounting in ("network", "local", "hitting_time"):
        # 32 nodes, 320 steps (cap 13), epsilon 10: the walk's amplification shows (sigma 1.84 vs 2.06);
        # on the tiny scenario's 8 nodes the network accountant reaches the local ceiling.
        scenario = {**tiny_scenario, "data": {"dataset": "breast_cancer", "num_clients": 32},
                    "decentralized": {**tiny_scenario["decentralized"], "algorithm": "random_walk",
                                      "topology": {"name": "hypercube", "dim": 5},
                                      "privacy": {"target_epsilon": 10.0, "delta": 1e-6}}}
        scenario["decentralized"].pop("sigma")
        scenario["decentralized"].pop("audit")
        scenario["decentralized"]["random_walk"] = {"steps": 320, "eval_every": 160, "checkpoint_every": 160,
                                                    "accounting": accounting}
        path = tmp_path / f"{accounting}.yaml"
        path.write_text(yaml.safe_dump(scenario))
        code, _, err = cli("run", path, "--run-dir", tmp_path / accounting, "--quiet")
        assert code == 0, err
        sigmas[accounting] = json.loads((tmp_path / accounting / "summary.json").read_text())[
            "final_metrics"]["random_walk.sigma"]
    assert sigmas["local"] > sigmas["network"] > sigmas["hitting_time"]


@pytest.mark.parametrize(("name", "params"), [("hypercube", {"dim": 4}), ("torus", {"rows": 3, "cols": 4})])
def test_the_walk_accountant_from_one_row_gives_the_dense_numbers(name, params):
    graph = build_graph(name, **params)
    w = metropolis_hastings(graph)
    difference = row_symmetry(graph, w)
    assert difference is not None
    # the group difference the row accountant relies on: W[u, v] = W[0, v - u] for every pair of nodes
    np.testing.assert_array_equal(full_matrix(w[0], difference), w)

    dense = walk_unit_rho(w, steps=80, cap=7, sensitivity=2.0, keep=80)
    row = walk_unit_rho(w, steps=80, cap=7, sensitivity=2.0, keep=80, difference=difference)

    np.testing.assert_allclose(row.matrix, dense.matrix, rtol=1e-12)
    np.testing.assert_allclose(row.maximum, dense.maximum, rtol=1e-12)
    # ties (all neighbours of a hypercube node) may pick another pair, never a smaller value
    np.testing.assert_allclose(dense.matrix[row.pair[80][0], row.pair[80][1]], dense.maximum[80], rtol=1e-12)


def test_the_run_accounts_a_hypercube_walk_from_one_row(monkeypatch, tiny_scenario):
    from testbed.decentralized import driver, privacy
    from testbed.decentralized.problem import build_problem

    seen = []
    original = privacy.walk_unit_rho
    monkeypatch.setattr(privacy, "walk_unit_rho", lambda *a: seen.append(a[-1]) or original(*a))
    problem = build_problem(tiny_scenario, with_data=False)
    config = problem.config
    driver._UNIT_RHO_CACHE.clear()
    driver.unit_rho(problem, config.phase("random_walk"))
    assert problem.graph.graph["name"] == "hypercube" and seen and seen[0] is not None
