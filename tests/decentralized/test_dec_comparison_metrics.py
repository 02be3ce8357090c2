"""The Fig.-1 comparison's final metrics (``comparison.<index>.<name>.*``) against its artifacts' curves."""

import json

import numpy as np
import yaml


def _expected(distance: np.ndarray, walk: np.ndarray, gossip: np.ndarray) -> dict[str, float]:
    """The metrics recomputed from the curves: share of distances with walk < gossip, the first
    distance from which gossip stays at or below the walk (and is below it somewhere), with the
    sentinel max distance + 1 when there is none, and both mean losses at distance 1."""
    tails = [list(zip(gossip[i:], walk[i:])) for i in range(len(distance))]
    overtakes = [int(d) for d, tail in zip(distance, tails)
                 if all(g <= w for g, w in tail) and any(g < w for g, w in tail)]
    first = list(distance).index(1)
    return {"walk_below_gossip_share": sum(w < g for w, g in zip(walk, gossip)) / len(distance),
            "gossip_overtakes_from": min(overtakes, default=int(distance[-1]) + 1),
            "random_walk_d1": walk[first], "gossip_d1": gossip[first], "max_distance": int(distance[-1])}


def test_accounting_only_run_reports_each_topologys_crossover_as_final_metrics(cli, tmp_path):
    # Unclipped and with a short walk (factor 1), so that on these tiny graphs the walk is below
    # gossip everywhere on the hypercube (sentinel) and gossip overtakes it far away on the grid.
    scenario = {"name": "fig1-metrics", "kind": "decentralized", "seed": 0, "report": {"kind": "privacy"},
                "decentralized": {"train": False, "topology": {"name": "hypercube", "dim": 4}, "comparison": {
                    "topologies": [{"name": "hypercube", "dim": 4}, {"name": "grid", "rows": 4, "cols": 4}],
                    "clip_to_local": False, "walk_factor": 1.0}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        curves = {index: tuple(artifacts[f"comparison.{index}.{key}"]
                               for key in ("random_walk.distance", "random_walk.mean", "gossip.mean"))
                  for index in (0, 1)}
        assert all(np.array_equal(artifacts[f"comparison.{i}.gossip.distance"], curves[i][0]) for i in (0, 1))
    expected = {f"comparison.{index}.{name}.{key}": value
                for index, name in ((0, "hypercube"), (1, "grid"))
                for key, value in _expected(*curves[index]).items()}
    assert sorted(final) == sorted(expected)
    for key, value in expected.items():
        assert np.isclose(final[key], value, rtol=1e-12, atol=0), key
    # Both branches are exercised: no crossover (sentinel 4 + 1) on the hypercube, one on the grid.
    assert final["comparison.0.hypercube.walk_below_gossip_share"] == 1.0
    assert final["comparison.0.hypercube.gossip_overtakes_from"] == 5
    assert 0 < final["comparison.1.grid.walk_below_gossip_share"] < 1
    assert final["comparison.1.grid.gossip_overtakes_from"] <= final["comparison.1.grid.max_distance"] == 6
    assert final["comparison.0.hypercube.random_walk_d1"] < final["comparison.0.hypercube.gossip_d1"]
