"""Federated scenarios end to end on Flower's simulation engine (tiny: 4 clients, 3 rounds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.faults import KILL_AFTER_RECORDS
from tests.browser import assert_readable
from tests.conftest import requires_chromium
from tests.processes import cli_process

# One CPU, so one client actor: each actor costs its simulation about 4.5 CPU s of imports, more
# than these tiny clients train. The numbers do not depend on the pool's size; the cluster tests
# compare this scenario on one actor with three nodes' actors.
FEDERATED: dict[str, Any] = {
    "name": "fed-tiny",
    "kind": "federated",
    "seed": 5,
    "engine": {"type": "local", "num_cpus": 1},
    "data": {"dataset": "digits", "num_clients": 4, "partition": {"type": "dirichlet", "beta": 0.5}},
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 16},
    "federated": {"rounds": 3, "local_epochs": 1, "strategy": {"name": "fedavg"},
                  "attack": {"name": "sign_flip", "fraction": 0.25}},
    "report": {"kind": "robustness"},
}


def _rounds(run_dir: Path) -> list[dict]:
    """Metrics records without timings, which legitimately differ between runs."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in records]


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fed") / "fed.yaml"
    path.write_text(yaml.safe_dump(FEDERATED))
    return path


@pytest.fixture(scope="module")
def reference_run(scenario_file, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    done = cli_process("run", scenario_file, "--run-dir", run_dir, "--quiet")
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.integration
def test_every_client_trains_every_round_and_the_report_shows_robustness(reference_run):
    rounds = _rounds(reference_run)
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["clients_trained"] == r["clients_requested"] == 4 and r["clients_failed"] == 0 for r in rounds)
    # FedAvg weighs clients by their number of examples, so the one Byzantine client gets a real share.
    assert all(0 < r["malicious_weight"] < 1 for r in rounds)
    summary = json.loads((reference_run / "summary.json").read_text())
    assert summary["engine"]["type"] == "local" and summary["final_metrics"]["test_accuracy"] > 0.1
    page = (reference_run / "report" / "index.html").read_text()
    assert "<h2>Robustness</h2>" in page and "client-labels.png" in page
    # FedAvg's weights are the clients' example counts, the same every round: a sentence, not a flat chart.
    weight = rounds[0]["malicious_weight"]
    assert f"Weight given to Byzantine clients: {weight:.4g} in every round." in page
    assert "malicious-weight.png" not in page


@pytest.mark.integration
def test_same_seed_gives_the_same_accuracy_curve(scenario_file, reference_run, tmp_path):
    again = cli_process("run", scenario_file, "--run-dir", tmp_path / "again", "--quiet")
    assert again.returncode == 0, again.stderr
    assert _rounds(tmp_path / "again") == _rounds(reference_run)


@pytest.mark.integration
def test_driver_killed_mid_run_then_resumed_matches(scenario_file, reference_run, tmp_path):
    killed = cli_process("run", scenario_file, "--run-dir", tmp_path / "run", "--quiet",
                         env_extra={KILL_AFTER_RECORDS: "2"})
    assert killed.returncode == -9

    resumed = cli_process("resume", tmp_path / "run", "--quiet")

    assert resumed.returncode == 0, resumed.stderr
    assert _rounds(tmp_path / "run") == _rounds(reference_run)


@pytest.fixture(scope="module")
def baselines_run(tmp_path_factory) -> Path:
    """The median under sign flipping, with FedAvg and the no-attack median as baselines."""
    folder = tmp_path_factory.mktemp("baselines")
    scenario = {**FEDERATED, "federated": {**FEDERATED["federated"], "strategy": {"name": "fedmedian"},
                                           "baselines": ["fedavg", "no_attack"]}}
    (folder / "fed.yaml").write_text(yaml.safe_dump(scenario))
    done = cli_process("run", folder / "fed.yaml", "--run-dir", folder / "run", "--quiet")
    assert done.returncode == 0, done.stderr
    return folder / "run"


@pytest.mark.integration
def test_baselines_run_beside_the_strategy_paired_and_overlaid_in_the_report(baselines_run, reference_run):
    # The reference run is FedAvg under sign flipping; here the strategy is the median and FedAvg a baseline.
    run = baselines_run
    # Same seed, same clients, same attackers: the FedAvg arm is exactly the plain FedAvg run.
    assert _rounds(run / "baselines" / "fedavg") == _rounds(reference_run)
    assert _rounds(run) != _rounds(reference_run)
    no_attack = yaml.safe_load((run / "baselines" / "no_attack" / "config.yaml").read_text())
    assert no_attack["federated"]["attack"] is None and no_attack["federated"]["strategy"]["name"] == "fedmedian"
    final = json.loads((run / "summary.json").read_text())["final_metrics"]
    assert final["baselines.fedavg.test_accuracy"] == _rounds(reference_run)[-1]["test_accuracy"]
    assert "baselines.no_attack.test_accuracy" in final
    # FedAvg weighs clients by their data size: an AUROC of those weights would read as a detection.
    assert "baselines.fedavg.malicious_weight" in final and "baselines.fedavg.attacker_auroc" not in final
    page = (run / "report" / "index.html").read_text()
    assert "<h2>Baselines</h2>" in page and "baselines-accuracy.png" in page and "fedmedian, no attack" in page
    difference = final["test_accuracy"] - final["baselines.fedavg.test_accuracy"]
    assert "fedmedian vs fedavg under sign_flip</b>: final test accuracy" in page
    assert f"difference {difference:+.4f} (1 seed: no interval" in page


@pytest.mark.integration
@requires_chromium
def test_robustness_report_leads_with_the_baselines_and_marks_the_attackers_in_headless_chromium(baselines_run):
    page = assert_readable(baselines_run / "report", first_screen="baselines-accuracy.png", name="robustness")
    assert page.sections[:3] == ["Answer", "Baselines", "Robustness"]
    html = (baselines_run / "report" / "index.html").read_text()
    assert "(mean over rounds)" in html and "Final values (last record)" in html  # one name per measure
    assert "Unchanged over the run" in html  # clients_requested and the like: a table row, not a chart
    assert "curve-clients_requested.png" not in html


@pytest.mark.integration
def test_failing_clients_do_not_stop_a_round(write_scenario, tmp_path):
    faulty = {**FEDERATED, "federated": {**FEDERATED["federated"], "attack": None,
                                         "faults": {"fraction": 0.25, "from_round": 2, "kind": "raise"}}}

    done = cli_process("run", write_scenario(faulty), "--run-dir", tmp_path / "run", "--quiet")

    assert done.returncode == 0, done.stderr
    rounds = _rounds(tmp_path / "run")
    assert [(r["clients_trained"], r["clients_failed"]) for r in rounds] == [(4, 0), (3, 1), (3, 1)]
    assert rounds[-1]["test_accuracy"] > rounds[0]["test_accuracy"]  # aggregation went on with the rest
    assert "client failures (all rounds)" in (tmp_path / "run" / "report" / "index.html").read_text()
