"""The one-run canary audit: the Steinke-Nasr-Jagielski bound, its power, the attackers, lower <= upper."""

import json

import numpy as np
import pytest
import yaml

from testbed.decentralized.audit import audit_power, epsilon_from_guesses, epsilon_lower_bound, walk_attack_tables
from testbed.topologies import build_graph, metropolis_hastings


@pytest.mark.parametrize(("m", "r", "v", "delta", "expected"), [
    (100, 100, 100, 0.0, 3.4930),
    (1000, 100, 100, 1e-5, 3.4654),
    (1000, 1000, 1000, 0.0, 5.8091),
    (1000, 1000, 1000, 1e-5, 5.7823),
    (1000, 1000, 900, 0.0, 2.0212),
    (10_000, 10_000, 10_000, 1e-5, 7.8343),
    (1000, 500, 400, 1e-5, 1.1980),
])
def test_one_run_bound_reproduces_the_reference_values(m, r, v, delta, expected):
    # Reference values: the project notes' evaluation of the same theorem (significance 0.05)
    assert epsilon_from_guesses(m, r, v, delta, 0.05) == pytest.approx(expected, abs=1e-4)


def test_perfect_scores_certify_a_large_epsilon_and_random_scores_nothing():
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5

    perfect = epsilon_lower_bound(included.astype(float), included, delta=1e-5, significance=0.05)
    random = epsilon_lower_bound(rng.random(1000), included, delta=1e-5, significance=0.05)

    assert perfect > 3.0
    assert random < 0.3


def test_audit_power_bounds_every_attacker_and_a_perfect_one_reaches_it():
    rng = np.random.default_rng(1)
    included = rng.random(300) < 0.5
    power = audit_power(300, delta=1e-5, significance=0.05, included=int(included.sum()))

    lowers = [epsilon_lower_bound(rng.random(300) + shift * included, included, delta=1e-5, significance=0.05)
              for shift in (0.0, 0.3, 1.0, 3.0)]
    perfect = epsilon_lower_bound(included.astype(float), included, delta=1e-5, significance=0.05)

    assert all(lower <= power for lower in lowers) and max(lowers) > 0.5
    assert perfect == pytest.approx(power, rel=1e-9)  # the top-scored are exactly the included ones
    # Without the draw, every guess counts as right: a bound over every draw, so at least as large
    assert audit_power(300, delta=1e-5, significance=0.05) >= power


def test_audit_power_grows_with_the_canaries_and_the_significance():
    powers = [audit_power(m, delta=1e-5, significance=0.05, included=m // 2) for m in (20, 200, 2000)]
    assert powers[0] < powers[1] < powers[2] < 8.0  # 2000 canaries still cannot test epsilon 8
    assert audit_power(200, 1e-5, 0.2, 100) > audit_power(200, 1e-5, 0.05, 100)
    assert audit_power(0, 1e-5, 0.05) == 0.0


def test_walk_attack_tables_match_matrix_power_loops():
    # Prepare: explicit powers of a small walk as the reference
    w, source, steps = metropolis_hastings(build_graph("ring", n=5)), 1, 9
    powers = [np.linalg.matrix_power(w, k) for k in range(steps + 1)]

    first, gap = walk_attack_tables(w, source, steps)

    for v in (0, 2, 4):
        for t in range(1, steps + 1):
            expected = sum(powers[k][source, v] for k in range(1, t + 1)) / t
            assert first[t, v] == pytest.approx(expected, abs=1e-12)
        for g in range(2, steps + 1):
            bridge = sum(powers[j][v, source] * powers[g - j][source, v] for j in range(1, g)) / powers[g][v, v]
            assert gap[g, v] == pytest.approx(bridge / (g - 1), abs=1e-10)
    assert np.all(first[:, source] == 0) and np.all(gap[:, source] == 0)


AUDIT_SCENARIO = {
    "name": "audit", "kind": "decentralized", "seed": 5,
    "data": {"dataset": "breast_cancer", "num_clients": 6},
    "decentralized": {
        "algorithm": ["random_walk", "gossip", "local_dp"], "topology": {"name": "ring", "n": 6},
        "sigma": 0.6, "steps": 8, "eval_every": 8, "checkpoint_every": 8,
        "random_walk": {"steps": 60, "eval_every": 60, "checkpoint_every": 60},
        "gossip": {"rounds": 2}, "audit": {"canaries": 400, "source": 0}, "comparison": {"enabled": False},
    },
    "report": {"kind": "privacy"},
}


@pytest.mark.slow
def test_audit_lower_bounds_never_exceed_the_accountant_and_are_not_vacuous(cli, tmp_path):
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(AUDIT_SCENARIO))

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        for algorithm in ("random_walk", "gossip", "local_dp"):
            lower, upper = artifacts[f"{algorithm}.audit_lower"], artifacts[f"{algorithm}.audit_upper"]
            assert lower.shape == upper.shape == (5,)  # every observer v != source
            assert np.all(lower <= upper)
            assert lower.max() > 1.5  # the attackers see the canaries: the audit can fail
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    for algorithm in ("random_walk", "gossip", "local_dp"):  # the power of this draw of canaries
        assert final[f"{algorithm}.audit_max_lower"] <= final[f"{algorithm}.audit_power"] < 60.0
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "Canary audit" in page and "confidence 95%" in page and "at most detectable (power)" in page
