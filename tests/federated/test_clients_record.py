"""The per-client record (clients.jsonl): the attacker AUROC and honest-zeroed count on hand-made
weights, and the record of a tiny SDEA run that is killed mid-run and resumed (5 clients, 2 rounds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.faults import KILL_AFTER_RECORDS
from testbed.federated.clients_record import (
    CLIENTS_FILE,
    attacker_auroc,
    clients_line,
    read_rounds,
    rewind,
    round_metrics,
)
from testbed.run import RunFolder
from tests.federated.test_federated_runs import FEDERATED, _testbed

SDEA_TINY = {**FEDERATED, "name": "sdea-record-tiny",
             "data": {**FEDERATED["data"], "num_clients": 5},
             "federated": {"rounds": 2, "local_epochs": 1,
                           "strategy": {"name": "sdea", "epochs": 1, "batch_size": 32,
                                        "public": {"source": "sample_images", "size": 32}},
                           "attack": {"name": "min_max", "fraction": 0.4}}}


@pytest.mark.parametrize(("weights", "byzantine", "expected"), [
    ([0.0, 0.0, 0.3, 0.3, 0.4], [True, True, False, False, False], 1.0),  # attackers weigh least
    ([0.5, 0.4, 0.05, 0.05, 0.0], [True, True, False, False, False], 0.0),  # attackers weigh most
    ([0.2] * 5, [True, True, False, False, False], 0.5),  # all tied: chance
    ([0.1, 0.2, 0.2, 0.5], [True, True, False, False], 0.875),  # one tie of four pairs counts half
])
def test_attacker_auroc_on_known_weights(weights, byzantine, expected):
    assert attacker_auroc(weights, byzantine) == pytest.approx(expected)


def test_attacker_auroc_is_absent_without_attackers_or_without_honest_clients():
    assert attacker_auroc([0.5, 0.5], [False, False]) is None
    assert attacker_auroc([0.5, 0.5], [True, True]) is None
    assert "attacker_auroc" not in round_metrics(clients_line([0, 1], [0.5, 0.5], None, None, set()))


def test_sdea_is_scored_by_its_learned_weights_and_flagged_honest_clients_count_as_zeroed():
    # Two-group SDEA zeroes all three flagged clients, honest client 2 among them: the final weights
    # tie the attackers with client 2, the learned ones still rank the attackers lowest.
    line = clients_line([0, 1, 2, 3, 4], [0.0, 0.0, 0.0, 0.5, 0.5], [True, True, True, False, False],
                        [0.10, 0.12, 0.15, 0.30, 0.33], malicious={0, 1})
    assert round_metrics(line) == {"attacker_auroc": 1.0, "honest_zeroed": 1}
    # A rule that keeps the flagged clients' small weight (SDEA's code rule) still drops client 2.
    kept = clients_line([0, 1, 2], [0.1, 0.1, 0.8], [True, False, True], None, malicious={0})
    assert round_metrics(kept)["honest_zeroed"] == 1
    # FedAvg neither flags nor zeroes anyone.
    assert round_metrics(clients_line([0, 1, 2], [0.2, 0.3, 0.5], None, None, {0}))["honest_zeroed"] == 0


def test_an_equal_share_of_a_million_clients_is_not_zero_weight():
    # FedAvg over 10^6 equal clients weighs each 1e-6, the absolute bar: none is dropped, one that
    # gets a hundredth of its share is (1e-8), and at 20 clients the bar stays 1e-6.
    n = 1_000_000
    line = clients_line(range(n), [1 / n] * (n - 1) + [1e-8], None, None, malicious=set())
    assert round_metrics(line)["honest_zeroed"] == 1
    small = clients_line(range(20), [0.05] * 19 + [1e-6], None, None, malicious=set())
    assert round_metrics(small)["honest_zeroed"] == 1


def test_rewind_keeps_the_rounds_up_to_the_checkpoint_and_drops_a_torn_line(tmp_path):
    lines = [{"round": r, **clients_line([0, 1], [0.5, 0.5], None, None, {1})} for r in (1, 2, 3)]
    (tmp_path / CLIENTS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"round": 4, "cl')

    rewind(RunFolder(tmp_path), 2)

    assert read_rounds(tmp_path) == lines[:2]


@pytest.fixture(scope="module")
def resumed_sdea_run(tmp_path_factory) -> Path:
    """A tiny SDEA run killed after its round-2 metrics (round 1 checkpointed), with a stray round-2
    line and a torn one appended as a crash between the record and the checkpoint would leave
    them, then resumed."""
    folder = tmp_path_factory.mktemp("sdea-record")
    scenario = folder / "sdea.yaml"
    scenario.write_text(yaml.safe_dump(SDEA_TINY))
    run_dir = folder / "run"
    killed = _testbed("run", scenario, "--run-dir", run_dir, "--quiet", env_extra={KILL_AFTER_RECORDS: "2"})
    assert killed.returncode == -9, killed.stderr
    record = run_dir / CLIENTS_FILE
    assert [line["round"] for line in read_rounds(run_dir)] == [1]
    with open(record, "a") as handle:
        handle.write(json.dumps({**read_rounds(run_dir)[0], "round": 2}) + "\n" + '{"round": 3, "cli')

    resumed = _testbed("resume", run_dir, "--quiet")

    assert resumed.returncode == 0, resumed.stderr
    return run_dir


@pytest.mark.integration
def test_record_has_every_client_each_round_once_with_weights_summing_to_one(resumed_sdea_run):
    rounds = read_rounds(resumed_sdea_run)
    assert len(rounds) == len((resumed_sdea_run / CLIENTS_FILE).read_text().splitlines())  # no torn line left
    assert [line["round"] for line in rounds] == [1, 2]
    with np.load(resumed_sdea_run / "artifacts.npz") as artifacts:
        malicious = {str(i) for i in artifacts["malicious"] if i >= 0}
    assert len(malicious) == 2
    for line in rounds:
        assert list(line["clients"]) == ["0", "1", "2", "3", "4"]
        assert {c for c, e in line["clients"].items() if e["byzantine"]} == malicious
        assert sum(e["weight"] for e in line["clients"].values()) == pytest.approx(1, abs=1e-5)
        assert sum(e["learned"] for e in line["clients"].values()) == pytest.approx(1, abs=1e-5)
        assert all(isinstance(e["flagged"], bool) for e in line["clients"].values())


@pytest.mark.integration
def test_round_metrics_come_from_the_record_and_the_report_shows_the_heatmap(resumed_sdea_run):
    metrics = [json.loads(line) for line in (resumed_sdea_run / "metrics.jsonl").read_text().splitlines()]
    for record, line in zip(metrics, read_rounds(resumed_sdea_run), strict=True):
        assert record["round"] == line["round"]
        assert {k: record[k] for k in ("attacker_auroc", "honest_zeroed")} == round_metrics(line)
    final = json.loads((resumed_sdea_run / "summary.json").read_text())["final_metrics"]
    assert "attacker_auroc" in final and "honest_zeroed" in final
    page = (resumed_sdea_run / "report" / "index.html").read_text()
    assert "<h2>Client weights per round</h2>" in page and 'src="client-weights.png"' in page
    assert (resumed_sdea_run / "report" / "client-weights.png").stat().st_size > 0
    assert 'src="attacker-auroc.png"' in page
