"""The per-client record (clients.jsonl): the attacker AUROC and honest-zeroed count on hand-made
weights, the column format and the previous one read alike, and the record of a tiny SDEA run that is
killed mid-run and resumed (5 clients, 2 rounds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.errors import UserError
from testbed.faults import KILL_AFTER_RECORDS
from testbed.federated.clients_record import (
    CLIENTS_FILE,
    ClientsRound,
    append_round,
    attacker_auroc,
    clients_round,
    read_rounds,
    rewind,
    round_metrics,
)
from testbed.run import RunFolder
from tests.federated.test_federated_runs import FEDERATED
from tests.processes import cli_process

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
    assert "attacker_auroc" not in round_metrics(clients_round(1, [0, 1], [0.5, 0.5], None, None, set()))


def test_sdea_is_scored_by_its_learned_weights_and_flagged_honest_clients_count_as_zeroed():
    # Two-group SDEA zeroes all three flagged clients, honest client 2 among them: the final weights
    # tie the attackers with client 2, the learned ones still rank the attackers lowest.
    line = clients_round(1, [0, 1, 2, 3, 4], [0.0, 0.0, 0.0, 0.5, 0.5], [True, True, True, False, False],
                         [0.10, 0.12, 0.15, 0.30, 0.33], malicious={0, 1})
    assert round_metrics(line) == {"attacker_auroc": 1.0, "honest_zeroed": 1}
    # A rule that keeps the flagged clients' small weight (SDEA's code rule) still drops client 2.
    kept = clients_round(1, [0, 1, 2], [0.1, 0.1, 0.8], [True, False, True], None, malicious={0})
    assert round_metrics(kept)["honest_zeroed"] == 1 and kept.honest_dropped().tolist() == [2]
    # FedAvg neither flags nor zeroes anyone.
    assert round_metrics(clients_round(1, [0, 1, 2], [0.2, 0.3, 0.5], None, None, {0}))["honest_zeroed"] == 0


def test_an_equal_share_of_a_million_clients_is_not_zero_weight():
    # FedAvg over 10^6 equal clients weighs each 1e-6, the absolute bar: none is dropped, one that
    # gets a hundredth of its share is (1e-8), and at 20 clients the bar stays 1e-6.
    n = 1_000_000
    line = clients_round(1, range(n), [1 / n] * (n - 1) + [1e-8], None, None, malicious=set())
    assert round_metrics(line)["honest_zeroed"] == 1
    small = clients_round(1, range(20), [0.05] * 19 + [1e-6], None, None, malicious=set())
    assert round_metrics(small)["honest_zeroed"] == 1


def _same(a: ClientsRound, b: ClientsRound) -> bool:
    return a.line() == b.line()


def test_rewind_keeps_the_rounds_up_to_the_checkpoint_and_drops_a_torn_line(tmp_path):
    rounds = [clients_round(r, [0, 1], [0.5, 0.5], None, None, {1}) for r in (1, 2, 3)]
    for record in rounds:
        append_round(RunFolder(tmp_path), record)
    with open(tmp_path / CLIENTS_FILE, "a") as handle:
        handle.write('{"round": 4, "id')

    rewind(RunFolder(tmp_path), 2)

    assert [record.line() for record in read_rounds(tmp_path)] == [record.line() for record in rounds[:2]]


def test_a_round_reads_back_as_written_and_a_record_of_the_previous_format_reads_the_same(tmp_path):
    record = clients_round(4, [0, 2, 7], [0.0, 0.25, 0.75], [True, False, False], [0.1, 0.3, 0.6], malicious={0})
    append_round(RunFolder(tmp_path), record)
    assert json.loads((tmp_path / CLIENTS_FILE).read_text()) == {
        "round": 4, "ids": [0, 2, 7], "byzantine": [True, False, False], "weight": [0.0, 0.25, 0.75],
        "flagged": [True, False, False], "learned": [0.1, 0.3, 0.6]}
    (again,) = read_rounds(tmp_path)
    assert _same(again, record) and round_metrics(again) == round_metrics(record)

    # One mapping per line, partition id -> entry, as run folders before the columns hold it.
    old = {"round": 4, "clients": {str(c): {"byzantine": c == 0, "weight": w, "flagged": f, "learned": s}
                                   for c, w, f, s in zip([0, 2, 7], [0.0, 0.25, 0.75], [True, False, False],
                                                         [0.1, 0.3, 0.6])}}
    (tmp_path / CLIENTS_FILE).write_text(json.dumps(old) + "\n")
    (previous,) = read_rounds(tmp_path)
    assert _same(previous, record)


@pytest.mark.parametrize("line", [
    {"round": 1, "ids": [0, 1], "byzantine": [False], "weight": [0.5, 0.5]},  # a short column
    {"round": 1, "ids": [0, 1], "byzantine": [False, True], "weight": [0.5, "0.5"]},  # a string weight
    {"round": 1, "ids": [0, -1], "byzantine": [False, True], "weight": [0.5, 0.5]},  # a negative id
    {"round": 1, "ids": [0, 1], "byzantine": [0, 1], "weight": [0.5, 0.5]},  # numbers for flags
    {"round": "1", "ids": [0], "byzantine": [False], "weight": [1.0]},
    {"round": 1, "clients": {"0": {"byzantine": False}}},  # the previous format, without a weight
])
def test_a_line_of_another_shape_is_one_error_naming_the_file_and_line(tmp_path, line):
    good = clients_round(1, [0, 1], [0.5, 0.5], None, None, set()).line()
    (tmp_path / CLIENTS_FILE).write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(UserError, match=r"clients\.jsonl, line 2: not a round of the per-client record"):
        read_rounds(tmp_path)


@pytest.fixture(scope="module")
def resumed_sdea_run(tmp_path_factory) -> Path:
    """A tiny SDEA run killed after its round-2 metrics (round 1 checkpointed), with a stray round-2
    line and a torn one appended as a crash between the record and the checkpoint would leave
    them, then resumed."""
    folder = tmp_path_factory.mktemp("sdea-record")
    scenario = folder / "sdea.yaml"
    scenario.write_text(yaml.safe_dump(SDEA_TINY))
    run_dir = folder / "run"
    killed = cli_process("run", scenario, "--run-dir", run_dir, "--quiet", env_extra={KILL_AFTER_RECORDS: "2"})
    assert killed.returncode == -9, killed.stderr
    record = run_dir / CLIENTS_FILE
    assert [line.round for line in read_rounds(run_dir)] == [1]
    with open(record, "a") as handle:
        handle.write(json.dumps({**read_rounds(run_dir)[0].line(), "round": 2}) + "\n" + '{"round": 3, "id')

    resumed = cli_process("resume", run_dir, "--quiet")

    assert resumed.returncode == 0, resumed.stderr
    return run_dir


@pytest.mark.integration
def test_record_has_every_client_each_round_once_with_weights_summing_to_one(resumed_sdea_run):
    rounds = read_rounds(resumed_sdea_run)
    assert len(rounds) == len((resumed_sdea_run / CLIENTS_FILE).read_text().splitlines())  # no torn line left
    assert [line.round for line in rounds] == [1, 2]
    with np.load(resumed_sdea_run / "artifacts.npz") as artifacts:
        malicious = {int(i) for i in artifacts["malicious"] if i >= 0}
    assert len(malicious) == 2
    for line in rounds:
        assert line.ids.tolist() == [0, 1, 2, 3, 4]
        assert set(line.ids[line.byzantine].tolist()) == malicious
        assert line.weight.sum() == pytest.approx(1, abs=1e-5)
        assert line.learned is not None and line.learned.sum() == pytest.approx(1, abs=1e-5)
        assert line.flagged is not None and line.flagged.dtype == bool


@pytest.mark.integration
def test_round_metrics_come_from_the_record_and_the_report_shows_the_heatmap(resumed_sdea_run):
    metrics = [json.loads(line) for line in (resumed_sdea_run / "metrics.jsonl").read_text().splitlines()]
    for record, line in zip(metrics, read_rounds(resumed_sdea_run), strict=True):
        assert record["round"] == line.round
        assert {k: record[k] for k in ("attacker_auroc", "honest_zeroed")} == round_metrics(line)
    final = json.loads((resumed_sdea_run / "summary.json").read_text())["final_metrics"]
    assert "attacker_auroc" in final and "honest_zeroed" in final
    page = (resumed_sdea_run / "report" / "index.html").read_text()
    assert "<h2>Client weights per round</h2>" in page and 'src="client-weights.png"' in page
    assert (resumed_sdea_run / "report" / "client-weights.png").stat().st_size > 0
    assert 'src="attacker-auroc.png"' in page
