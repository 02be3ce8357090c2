"""``kind: decentralized`` through the CLI: validation errors, a privacy-target stop, the report,
and resume from a checkpoint."""

import json
import shutil

import numpy as np
import pytest
import yaml

from tests.browser import assert_readable
from tests.conftest import requires_chromium


def _write(tmp_path, scenario: dict, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["decentralized"].pop("sigma"),
     "decentralized: set sigma (the noise multiplier) or privacy.target_epsilon"),
    (lambda s: s["data"].update(num_clients=9), "data.num_clients: 9, but the topology 'hypercube' has 8 nodes"),
    (lambda s: s["decentralized"]["topology"].update(n=8),
     "decentralized.topology: graph 'hypercube': got an unexpected keyword argument 'n'"),
    (lambda s: s["decentralized"]["gossip"].update(rouns=3),
     "decentralized.gossip.rouns: unknown key (did you mean 'rounds'?)"),
    (lambda s: s["decentralized"]["audit"].update(source=8), "decentralized.audit.source: node 8 is not in 0..7"),
    (lambda s: s["decentralized"].update(algorithm=["gossip", "gossip"]), "an algorithm is listed twice"),
    (lambda s: s.update(engine={"type": "mpi", "num_procs": 9}), "engine.num_procs: 9 ranks for 8 nodes"),
    (lambda s: s["decentralized"].update(privacy={"non_private_baseline": "sometimes"}),
     "decentralized.privacy.non_private_baseline"),
])
def test_bad_scenarios_fail_with_one_line_naming_the_field(cli, tmp_path, tiny_scenario, change, message):
    change(tiny_scenario)
    path = _write(tmp_path, tiny_scenario)

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 2
    assert err.startswith(f"error: {path}") and message in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_target_stops_the_run_and_the_report_names_the_pair(cli, tmp_path, tiny_scenario):
    tiny_scenario["decentralized"].update(algorithm="random_walk", sigma=6.0)
    tiny_scenario["decentralized"]["privacy"] = {"target_epsilon": 1.5, "delta": 1e-5}
    path = _write(tmp_path, tiny_scenario)

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert final["random_walk.stopped_by_target"] and 0 < final["random_walk.stop_step"] < 40
    assert final["random_walk.exceeded_step"] == final["random_walk.stop_step"] + 1
    assert final["random_walk.exceeded_epsilon"] > 1.5 >= final["random_walk.epsilon_at_stop"]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["random_walk.epsilon"] for r in records) <= 1.5
    assert records[-1]["step"] == final["random_walk.stop_step"]
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    pair = f"pair ({final['random_walk.exceeded_u']} -&gt; {final['random_walk.exceeded_v']})"
    assert "target reached: stopped after step" in page and pair in page


@pytest.mark.slow
def test_full_run_writes_accounting_utility_and_comparison(cli, tmp_path, tiny_scenario):
    tiny_scenario["decentralized"]["comparison"] = {"enabled": True, "topologies": [
        {"name": "hypercube", "dim": 3}, {"name": "ring", "n": 8}]}
    path = _write(tmp_path, tiny_scenario)

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        for algorithm in ("random_walk", "gossip", "local_dp"):
            eps = artifacts[f"{algorithm}.pairwise_epsilon"]
            assert eps.shape == (8, 8) and np.all(np.diag(eps) == 0) and np.all(eps >= 0)
        assert str(artifacts["comparison.1.name"][0]) == "ring (n=8)"
        assert artifacts["comparison.0.random_walk.distance"].tolist() == [1, 2, 3]
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert final["random_walk.test_accuracy"] > 0.6
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    for title in ("Privacy budget", "Pairwise epsilon", "Epsilon against shortest-path distance",
                  "Utility against epsilon", "Canary audit"):
        assert title in page
    assert "local DP: every pair u -&gt; v at epsilon" in page  # one value for all pairs: no heatmap
    assert "No noise-free reference" in page


@pytest.mark.slow
def test_the_noise_free_baseline_trains_each_algorithm_without_noise(cli, tmp_path, tiny_scenario):
    tiny_scenario["decentralized"].update(algorithm=["random_walk", "local_dp"], sigma=8.0)
    tiny_scenario["decentralized"]["privacy"] = {"non_private_baseline": True}
    path = _write(tmp_path, tiny_scenario)

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    for algorithm in ("random_walk", "local_dp"):  # sigma 8 costs utility; no noise is no privacy
        assert final[f"nonprivate.{algorithm}.test_loss"] < final[f"{algorithm}.test_loss"]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    baseline = [r for r in records if r["algorithm"] == "nonprivate.random_walk"]
    assert [r["step"] for r in baseline] == [0, 10, 20, 30, 40]
    assert not any(key.endswith(".epsilon") for r in baseline for key in r)
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        assert not any(key.startswith("nonprivate.") for key in artifacts.files)
    assert "Dashed: the same algorithm with no noise" in (tmp_path / "run" / "report" / "index.html").read_text()


# Checkpoints: random walk at 1 + 20, 1 + 40 and 1 + 41 (done); gossip's first chunk ends at 42 + 3.
# With the noise-free arms after the three private ones (ending at 56), the walk's first ends at 56 + 20.
@pytest.mark.integration
@requires_chromium
def test_privacy_report_leads_with_the_answer_then_the_heatmap_in_headless_chromium(cli, tmp_path, tiny_scenario):
    tiny_scenario["decentralized"]["comparison"] = {"enabled": True, "topologies": [{"name": "hypercube", "dim": 3}]}
    tiny_scenario["decentralized"]["privacy"] = {"non_private_baseline": True}
    code, _, err = cli("run", _write(tmp_path, tiny_scenario), "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err

    page = assert_readable(tmp_path / "run" / "report", first_screen="pairwise-", name="privacy")
    assert page.sections[:3] == ["Privacy: epsilon spent, its audit, its cost", "Pairwise epsilon", "Privacy budget"]
    html = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "confidence" in html and "at most detectable" in html  # the audit's level and power


@pytest.mark.slow
@pytest.mark.parametrize(("baseline", "last_kept"), [(False, 45), (True, 76)])
def test_resume_from_an_earlier_checkpoint_ends_with_the_same_numbers(cli, tmp_path, tiny_scenario, monkeypatch,
                                                                       baseline, last_kept):
    # Prepare: a reference run that keeps every checkpoint, and a copy of its folder as a crash in
    # the middle of a phase would leave it: no summary, only the checkpoints up to ``last_kept``.
    from testbed import run as run_module

    monkeypatch.setattr(run_module, "KEEP_CHECKPOINTS", 100)
    tiny_scenario["decentralized"]["privacy"] = {"non_private_baseline": baseline}
    code, _, err = cli("run", _write(tmp_path, tiny_scenario), "--run-dir", tmp_path / "ref", "--quiet")
    assert code == 0, err
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "ref", crashed)
    (crashed / "summary.json").unlink()
    for checkpoint in (crashed / "checkpoints").iterdir():
        if int(checkpoint.stem.split("-")[1]) > last_kept:
            checkpoint.unlink()
    assert max(int(c.stem.split("-")[1]) for c in (crashed / "checkpoints").iterdir()) == last_kept

    # Execute
    code, _, err = cli("resume", crashed, "--quiet")

    # Assert
    assert code == 0, err
    assert (crashed / "metrics.jsonl").read_text() == (tmp_path / "ref" / "metrics.jsonl").read_text()
    finals = [json.loads((d / "summary.json").read_text())["final_metrics"] for d in (tmp_path / "ref", crashed)]
    assert finals[0] == finals[1]
    with np.load(tmp_path / "ref" / "artifacts.npz") as ref, np.load(crashed / "artifacts.npz") as resumed:
        assert all(np.array_equal(ref[key], resumed[key]) for key in ref.files)


def test_accounting_only_run_compares_the_three_algorithms_without_data(cli, tmp_path):
    scenario = {"name": "fig1-tiny", "kind": "decentralized", "seed": 0, "report": {"kind": "privacy"},
                "decentralized": {"train": False, "topology": {"name": "ring", "n": 10}, "comparison": {
                    "topologies": [{"name": "ring", "n": 10}, {"name": "complete", "n": 6}], "clip_to_local": False}}}

    code, _, err = cli("run", _write(tmp_path, scenario), "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    with np.load(tmp_path / "run" / "artifacts.npz") as artifacts:
        assert not any(key.startswith(("random_walk.", "gossip.", "local_dp.")) for key in artifacts.files)
        assert artifacts["comparison.0.random_walk.distance"].tolist() == [1, 2, 3, 4, 5]
        local = artifacts["comparison.1.local_dp.mean"]
        np.testing.assert_allclose(local, [2.0 / 2.0])  # alpha / (2 sigma^2), alpha = 2, sigma = 1
        walk = artifacts["comparison.1.random_walk.mean"]  # K_6 with W = 11^T/6: alpha T H_T/(sigma^2 n^2)
        from testbed.topologies import build_graph, harmonic_number, metropolis_hastings, walk_length

        T = walk_length(metropolis_hastings(build_graph("complete", n=6)), 1.0)
        np.testing.assert_allclose(walk, [2.0 * T * harmonic_number(T) / 36.0], rtol=1e-9)
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "No algorithm was trained" in page and "complete (n=6)" in page


def test_a_diverged_arm_is_flagged_in_the_summary_and_the_report(cli, tmp_path, tiny_scenario):
    # lr 50 under sigma 8: the walk's noisy steps push the loss far above its start; local DP's
    # lr 1e-4 barely moves it, so it ends below (the two arms pin both sides of the flag).
    tiny_scenario["decentralized"].update(algorithm=["random_walk", "local_dp"], sigma=8.0)
    tiny_scenario["decentralized"]["random_walk"]["lr"] = 50.0
    tiny_scenario["decentralized"]["local_dp"] = {"lr": 1e-4}
    tiny_scenario["decentralized"].pop("audit")
    path = _write(tmp_path, tiny_scenario)

    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")

    assert code == 0, err
    final = json.loads((tmp_path / "run" / "summary.json").read_text())["final_metrics"]
    assert final["random_walk.test_loss"] > final["random_walk.initial_test_loss"]
    assert final["random_walk.loss_above_start"] == 1.0 and final["local_dp.loss_above_start"] == 0.0
    page = (tmp_path / "run" / "report" / "index.html").read_text()
    assert page.count("DIVERGED: ended above its start") == 1
