"""The federated one-run canary audit (``federated.privacy.audit``, `testbed.federated.audit`): it
finds a broken DP-FedAvg and passes the correct one, its mechanism is the one the accountant counts,
its statistics (`testbed.privacy.one_run`), and the block's refusals."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flwr.app import Array, ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp.mod import localdp_mod
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    dp_fixed_clipping,
)

from testbed.decentralized import audit as decentralized_audit
from testbed.faults import KILL_AFTER_RECORDS
from testbed.federated.audit import CanaryAudit, flat
from testbed.federated.config import AuditConfig, PrivacyConfig
from testbed.federated.dp import SeededPrivacy
from testbed.federated.privacy_report import verdict_words
from testbed.privacy import one_run
from testbed.privacy.one_run import audit_power, canaries_needed, verdict
from testbed.seeding import SeedTree
from tests.browser import open_report
from tests.conftest import requires_chromium
from tests.core.test_bad_input_corpus import Case, assert_refused_cleanly
from tests.federated.test_federated_runs import _rounds
from tests.processes import cli_process

# Test size: 4 clients, 2 a round (q = 0.5), 10 rounds at z = 2.5: the accountant's epsilon is 3.27
# at delta 1e-5, below the 1000 canaries' power (about 4.5), so the audit can test it. The matched
# filter's cross-talk between canaries is about sqrt(included / parameters) of a canary's signal:
# hidden 256 (19,210 parameters) keeps it small enough for the broken mechanism to be found.
AUDITED: dict[str, Any] = {
    "name": "fed-audit-tiny",
    "kind": "federated",
    "seed": 0,
    "engine": {"type": "local", "num_cpus": 1},
    "data": {"dataset": "digits", "num_clients": 4, "partition": {"type": "iid"}},
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 256},
    "federated": {"rounds": 10, "local_epochs": 1, "strategy": {"name": "fedavg"}, "sampling": {"fraction": 0.5},
                  "privacy": {"mode": "central", "clipping": "fixed", "clip_on": "server", "noise_multiplier": 2.5,
                              "clipping_norm": 1.0, "delta": 1.0e-5, "audit": {"canaries": 1000}}},
    "report": {"kind": "privacy"},
}


@pytest.fixture(scope="module")
def audited_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audit") / "audited.yaml"
    path.write_text(yaml.safe_dump(AUDITED))
    return path


@pytest.fixture(scope="module")
def correct_run(audited_file, tmp_path_factory) -> Path:
    """The test-size audited scenario on Flower's DP wrapper as it is."""
    run_dir = tmp_path_factory.mktemp("correct") / "run"
    done = cli_process("run", audited_file, "--run-dir", run_dir, "--quiet")
    assert done.returncode == 0, done.stderr
    return run_dir


def _final_and_page(run_dir: Path) -> tuple[dict[str, Any], str]:
    final = json.loads((run_dir / "summary.json").read_text())["final_metrics"]
    return final, (run_dir / "report" / "index.html").read_text()


@pytest.mark.integration
def test_the_audit_finds_noise_drawn_but_not_added_and_passes_the_correct_mechanism(cli, audited_file, correct_run,
                                                                                     tmp_path, monkeypatch):
    drawn: list[float] = []

    def drawn_not_added(arrays: list[np.ndarray], std: float) -> None:
        for array in arrays:  # drawn as Flower draws it, then dropped: the accountant still counts it
            np.random.normal(0, std, array.shape)
        drawn.append(std)

    # Flower's server-side aggregation runs in the driver's process: run in this one, the patch reaches it.
    monkeypatch.setattr(dp_fixed_clipping, "add_gaussian_noise_inplace", drawn_not_added)
    code, _, err = cli("run", audited_file, "--run-dir", tmp_path / "broken", "--quiet")
    assert code == 0, err
    correct, correct_page = _final_and_page(correct_run)
    broken, broken_page = _final_and_page(tmp_path / "broken")

    assert len(drawn) == AUDITED["federated"]["rounds"]  # the broken run went through the patched wrapper
    assert broken["epsilon"] == correct["epsilon"] == broken["privacy.audit.accountant_epsilon"]
    assert 3 < correct["epsilon"] < correct["privacy.audit.power"]  # the audit can test this epsilon
    assert correct["privacy.audit.verdict"] == "consistent"
    assert correct["privacy.audit.epsilon_lower_bound"] <= correct["epsilon"]
    assert broken["privacy.audit.verdict"] == "violation"
    assert broken["privacy.audit.epsilon_lower_bound"] > broken["epsilon"]
    assert "Consistent:" in correct_page and "Violation:" not in correct_page
    assert "Violation: the mechanism leaks more than accounted" in broken_page


# Local DP (LocalDpMod) at z = 3 over 3 rounds: the accountant composes every round at q = 1 (2.54 at
# delta 1e-5), below the power of 300 sample canaries (3.34). Each canary's release in each round
# goes through Flower's mod (900 releases: 1000 canaries over 10 rounds took a minute).
SAMPLE_CANARIES = 300
LOCAL: dict[str, Any] = {**AUDITED, "name": "fed-local-audit-tiny", "federated": {
    **AUDITED["federated"], "rounds": 3,
    "privacy": {"mode": "local", "noise_multiplier": 3.0, "clipping_norm": 1.0, "delta": 1.0e-5,
                "audit": {"canaries": SAMPLE_CANARIES, "kind": "sample"}}}}


@pytest.mark.integration
def test_the_sample_canaries_find_local_dp_noise_drawn_but_not_added(cli, tmp_path, monkeypatch):
    scenario = tmp_path / "local.yaml"
    scenario.write_text(yaml.safe_dump(LOCAL))
    code, _, err = cli("run", scenario, "--run-dir", tmp_path / "correct", "--quiet")
    assert code == 0, err
    drawn: list[float] = []

    def drawn_not_added(arrays: list[np.ndarray], std: float) -> None:
        for array in arrays:  # drawn as the mod draws it, then dropped: the accountant still counts it
            np.random.normal(0, std, array.shape)
        drawn.append(std)

    # The canaries' releases are made in the driver's process (the real clients' in Ray's workers).
    monkeypatch.setattr(localdp_mod, "add_gaussian_noise_inplace", drawn_not_added)
    code, _, err = cli("run", scenario, "--run-dir", tmp_path / "broken", "--quiet")
    assert code == 0, err
    correct, correct_page = _final_and_page(tmp_path / "correct")
    broken, _ = _final_and_page(tmp_path / "broken")

    assert len(drawn) == SAMPLE_CANARIES * LOCAL["federated"]["rounds"]  # every canary's release went through the mod
    assert broken["epsilon"] == correct["epsilon"] and 2 < correct["epsilon"] < correct["privacy.audit.power"]
    assert correct["privacy.audit.verdict"] == "consistent"
    assert broken["privacy.audit.verdict"] == "violation"
    assert broken["privacy.audit.epsilon_lower_bound"] > broken["epsilon"]
    assert "Consistent:" in correct_page and "Audit (one run, sample canaries, local DP)" in correct_page


@pytest.mark.integration
@requires_chromium
def test_the_privacy_page_answers_epsilon_and_its_audit_on_the_first_screen(correct_run):
    page = open_report(correct_run / "report")

    assert page.sections[:2] == ["Answer", "Privacy"]
    assert {"Answer", "Privacy"} <= set(page.sections_on_first_screen())
    html = (correct_run / "report" / "index.html").read_text()
    answer = html.split("<h2>Answer</h2>")[1].split("</section>")[0]
    assert "Privacy spent</b>: epsilon 3.27" in answer and "<b>Audit</b>: consistent" in answer


@pytest.mark.integration
def test_an_audited_run_killed_and_resumed_ends_with_the_same_audit(audited_file, correct_run, tmp_path):
    killed = cli_process("run", audited_file, "--run-dir", tmp_path / "run", "--quiet",
                         env_extra={KILL_AFTER_RECORDS: "4"})  # after round 4's record, before its checkpoint
    assert killed.returncode == -9
    resumed = cli_process("resume", tmp_path / "run", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    rounds = _rounds(tmp_path / "run")
    assert rounds == _rounds(correct_run)  # every round's audit so far included: the scores were checkpointed
    assert rounds[-1]["privacy.audit.verdict"] == "consistent"


@pytest.fixture
def server_identity(monkeypatch):
    """Flower stamps a new message with the running ServerApp's identity: here, run 1's."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    for attribute, value in (("_run_id", 1), ("_node_id", SUPERLINK_NODE_ID), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, attribute, value)


def _reply(arrays: ArrayRecord, instruction: Message) -> Message:
    return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": 7, "train_loss": 1.0})}),
                   reply_to=instruction)


def _mechanism(noise_multiplier: float, per_round: int, dimension: int, canaries: int = 50, clip_on: str = "server"):
    """SeededPrivacy around Flower's server-side wrapper with an audit of ``canaries`` (the included
    ones in every round: q = 1), the global model zero, and ``per_round`` real replies that
    move one weight by 0.5."""
    config = AuditConfig(canaries=canaries)
    privacy = PrivacyConfig(clipping_norm=1.5, audit=config)  # its noise multiplier unused: Flower's wrapper adds it
    wrapper = (DifferentialPrivacyServerSideFixedClipping if clip_on == "server"
               else DifferentialPrivacyClientSideFixedClipping)
    dp = wrapper(FedAvg(), noise_multiplier, 1.5, per_round)
    audit = CanaryAudit(config, privacy, 1.0, SeedTree(3).child("privacy.audit"), clip_on_server=clip_on == "server")
    seeded = SeededPrivacy(dp, SeedTree(3).child("privacy"), "num-examples", audit)
    start = ArrayRecord({"w": Array(np.zeros((dimension // 2, 2), dtype=np.float32))})
    seeded.current = start  # what configure_train keeps
    if isinstance(dp, DifferentialPrivacyServerSideFixedClipping):
        dp.current_arrays = start  # the wrapper clips the updates from it
    instruction = Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
    step = np.zeros((dimension // 2, 2), dtype=np.float32)
    step[0, 0] = 0.5  # every real client moves one weight by 0.5 (below C: unclipped; Flower cannot clip a 0)
    return seeded, audit, [_reply(ArrayRecord({"w": Array(step.copy())}), instruction) for _ in range(per_round)]


@pytest.mark.parametrize("clip_on", ["server", "client"])
def test_a_canary_adds_exactly_the_clipping_norm_over_the_clients_a_round_samples(server_identity, clip_on):
    seeded, audit, replies = _mechanism(0.0, per_round=4, dimension=200, clip_on=clip_on)
    released, _ = seeded.aggregate_train(1, replies)
    assert released is not None
    sampled = audit.sampled(1)
    assert 10 < len(sampled) < 40  # about half of the 50 canaries are in
    # Crafted at 2 C and clipped by Flower's wrapper to C (client-side clipping: sent at C, as the clipping
    # mod would); DP-FedAvg's fixed denominator: the 4 clients a round samples.
    expected = 1.5 * audit.directions(200)[sampled].astype(np.float64).sum(axis=0) / 4
    expected[0] += 0.5  # the 4 clients' mean
    np.testing.assert_allclose(flat(released), expected, atol=1e-5)
    assert seeded.dp.num_sampled_clients == 4  # told the round's reply count only for its aggregation


def test_the_noise_on_the_sum_of_clipped_updates_is_z_times_c_whatever_the_canaries(server_identity):
    seeded, audit, replies = _mechanism(2.0, per_round=5, dimension=40_000)
    released, _ = seeded.aggregate_train(1, replies)
    assert released is not None
    noise = flat(released) * 5 - 1.5 * audit.directions(40_000)[audit.sampled(1)].astype(np.float64).sum(axis=0)
    noise[0] -= 5 * 0.5
    # The sampled Gaussian mechanism the accountant counts: std z C = 3 on the sum (2% is 7 standard errors).
    assert noise.std() == pytest.approx(3.0, rel=0.02)
    assert audit.scores.any()  # the adversary saw the release


def test_the_statistics_are_shared_with_the_decentralized_audit():
    for name in ("one_run_p_value", "epsilon_from_guesses", "guess_counts", "epsilon_lower_bound", "audit_power",
                 "GUESS_FRACTIONS", "MAX_EPSILON"):
        assert getattr(decentralized_audit, name) is getattr(one_run, name)


@pytest.mark.parametrize("epsilon", [0.8, 1.5])
def test_canaries_needed_is_the_first_count_whose_power_passes_epsilon(epsilon):
    """Against a plain scan of every m (the power is not monotone in m, so up to a few off)."""
    power = lambda m: audit_power(m, 1e-5, 0.05, included=m // 2)
    first = next(m for m in count(1) if power(m) > epsilon)
    needed = canaries_needed(epsilon, 1e-5, 0.05)
    assert needed is not None and power(needed) > epsilon
    assert first <= needed <= first * 1.1


def test_no_canary_count_can_test_an_epsilon_above_the_powers_peak():
    # The delta term 2 m delta of the bound grows with m: at delta 1e-3 the power peaks below 3.
    assert max(audit_power(m, 1e-3, 0.05, included=m // 2) for m in (10, 30, 100, 300, 1000)) < 3
    assert canaries_needed(3.0, 1e-3, 0.05) is None
    assert canaries_needed(4.0, 1e-5, 0.05) in range(500, 700)  # the one-run paper's regime: hundreds


@pytest.mark.parametrize(("lower", "power", "accountant", "said"), [
    (4.0, 4.5, 3.3, "violation"),  # shown above the accountant
    (1.0, 4.5, 3.3, "consistent"),  # could have shown it, did not
    (3.3, 4.5, 3.3, "consistent"),  # at the accountant, not above it
    (1.0, 2.9, 8.0, "too weak"),  # could not have shown it
    (2.9, 2.9, 2.9, "consistent"),
])
def test_the_verdict_rule(lower, power, accountant, said):
    assert verdict(lower, power, accountant) == said


@pytest.mark.parametrize(("epsilon", "words"), [
    (3.0, "about {} canaries would test it"),  # 50 canaries show at most 1.9: too few, a few hundred would do
    (8.0, "no number of canaries can at delta 1e-05"),  # beyond any count's power at this delta
])
def test_a_too_weak_audit_says_how_many_canaries_would_test_the_bound(epsilon, words):
    config = AuditConfig(canaries=50)
    audit = CanaryAudit(config, PrivacyConfig(audit=config), 0.5, SeedTree(3).child("privacy.audit"),
                        clip_on_server=True)
    record = audit.metrics(epsilon)
    assert record["privacy.audit.verdict"] == "too weak" and record["privacy.audit.power"] < 2
    needed = record.get("privacy.audit.canaries_needed")
    assert needed == canaries_needed(epsilon, 1e-5, 0.05)  # epsilon on the 0.1 grid the audit rounds up to
    assert words.format(needed) in verdict_words(record, 1e-5)


def _case(name: str, audit: dict[str, Any], words: tuple[str, ...], **privacy: Any) -> Case:
    block = {"mode": "central", "noise_multiplier": 1.0, "delta": 1e-5, "audit": audit, **privacy}
    return Case(f"audit-{name}", "federated", {"federated": {"privacy": block}}, words)


CASES = [
    _case("local-dp", {"canaries": 100}, ("federated.privacy.audit.kind", "use kind: sample"), mode="local"),
    _case("sample-kind", {"canaries": 100, "kind": "sample"}, ("federated.privacy.audit.kind", "use kind: client")),
    _case("adaptive", {"canaries": 100}, ("federated.privacy.audit", "clipping: fixed"), clipping="adaptive",
          clipped_count_stddev=10.0),
    _case("no-canaries", {"canaries": 0}, ("federated.privacy.audit.canaries",)),
    _case("canaries-text", {"canaries": "many"}, ("federated.privacy.audit.canaries",)),
    _case("significance", {"canaries": 100, "significance": 1.5}, ("federated.privacy.audit.significance",)),
    _case("unknown-key", {"canaries": 100, "attacker": "white-box"}, ("federated.privacy.audit.attacker",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_audit_block_is_one_line_exit_2(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def test_an_audit_of_another_rule_than_fedavg_is_refused(cli, tmp_path, monkeypatch):
    case = Case("audit-strategy", "federated", {"federated": {
        "strategy": {"name": "fedavgm"}, "attack": None,
        "privacy": {"mode": "central", "noise_multiplier": 1.0, "audit": {"canaries": 100}}}},
        ("federated.privacy.audit", "strategy fedavg"))
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)
