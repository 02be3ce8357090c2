"""`testbed report RUN --audit`: one page an auditor can sign off (issue 38, item 6)."""

from __future__ import annotations

import pytest

from testbed.federated.findings import federated_findings
from testbed.report.audit_page import Finding, verdict_line
from testbed.report.render import RunData
from testbed.run import RunFolder

PRIVACY = {"mode": "central", "noise_multiplier": 1.0, "clipping_norm": 1.0, "delta": 1e-5, "target_epsilon": 3.0}


def _audited(verdict: str, lower: float, epsilon: float = 2.5) -> dict:
    return {"round": 10, "test_accuracy": 0.6, "epsilon": epsilon, "privacy.audit.verdict": verdict,
            "privacy.audit.epsilon_lower_bound": lower, "privacy.audit.power": 4.4, "privacy.audit.canaries": 1000,
            "privacy.audit.significance": 0.05}


def _run(tmp_path, record: dict, attack: dict | None = None, baselines: list | None = None,
         final: dict | None = None) -> RunFolder:
    config = {"name": "audited", "kind": "federated", "seed": 0,
              "federated": {"rounds": 10, "strategy": {"name": "sdea"}, "privacy": PRIVACY, "attack": attack,
                            "baselines": baselines or []}}
    run = RunFolder.create(tmp_path / "run", config)
    run.append_metrics(record)
    run.write_summary({"name": "audited", "kind": "federated", "status": "completed",
                       "final_metrics": {"test_accuracy": record["test_accuracy"], **(final or {})},
                       "source": {"commit": "abc123", "dirty": False, "file": "scenarios/x.yaml",
                                  "overrides": ["seed=1"]}})
    run.report_dir.mkdir()
    return run


def test_a_broken_mechanism_reads_do_not_sign_off_and_leads_the_page(tmp_path, cli):
    run = _run(tmp_path, _audited("violation", 4.2), attack={"name": "lie", "fraction": 0.2},
               baselines=["fedavg", "no_attack"],
               final={"baselines.fedavg.test_accuracy": 0.5, "baselines.no_attack.test_accuracy": 0.7})

    code, out, err = cli("report", run.path, "--audit")

    assert code == 0, err
    assert "Do not sign off: a promise is violated (1 violated, 1 measured, 1 holds)." in out
    page = (run.report_dir / "audit.html").read_text()
    rows = page.split("<tr>")[2:]
    assert "privacy (canary audit)" in rows[0] and "violated" in rows[0] and "lower bound 4.2" in rows[0]
    assert "fedavg under the same attack 0.5000 (+0.1000)" in page and "without attackers 0.7000 (-0.1000)" in page
    assert "commit abc123" in page and "testbed run scenarios/x.yaml --set seed=1" in page


def test_each_audit_verdict_maps_to_a_status_and_a_missing_audit_is_not_measured(tmp_path):
    def statuses(record):
        data = RunData.load(_run(tmp_path / str(len(list(tmp_path.iterdir()))), record))
        return [(f.area, f.status) for f in federated_findings(data)]

    assert statuses(_audited("consistent", 0.7)) == [("privacy (accountant)", "holds"),
                                                     ("privacy (canary audit)", "holds")]
    assert statuses(_audited("too weak", 0.7))[1] == ("privacy (canary audit)", "too weak to tell")
    assert statuses(_audited("consistent", 0.7, epsilon=3.5))[0] == ("privacy (accountant)", "violated")
    plain = {"round": 10, "test_accuracy": 0.6, "epsilon": 2.5}
    assert statuses(plain)[1] == ("privacy (canary audit)", "not measured")


def test_the_verdict_line_names_the_worst_status():
    holds, weak = Finding("a", "p", "m", "holds"), Finding("b", "p", "m", "too weak to tell")
    assert verdict_line([holds]) == "Every promise holds (1 holds)."
    assert verdict_line([holds, weak]).startswith("Not enough evidence to sign off")
    assert verdict_line([]).startswith("Nothing to audit")
    with pytest.raises(ValueError, match="status"):
        Finding("a", "p", "m", "fine")


def test_audit_of_a_sweep_folder_is_refused_in_one_line(tmp_path, cli):
    sweep = RunFolder.create(tmp_path / "sweep", {"name": "s", "kind": "federated", "sweep": {"grid": {"seed": [0]}}})
    sweep.write_summary({"variants": {}})

    code, out, err = cli("report", sweep.path, "--audit")

    assert code == 2 and err.count("\n") == 1 and "--audit reads one run, not a sweep" in err


def test_membership_inference_is_held_against_the_accountant(tmp_path):
    final = {"membership_loss_tpr_at_1pct": 0.02, "membership_lira_tpr_at_1pct": 0.05,
             "membership_loss_epsilon_lower_bound": 0.0, "membership_lira_epsilon_lower_bound": 0.9,
             "membership_epsilon_ceiling": 4.5}
    data = RunData.load(_run(tmp_path / "a", _audited("consistent", 0.7), final=final))
    (member,) = [f for f in federated_findings(data) if f.area == "privacy (membership inference)"]
    assert member.status == "holds" and "epsilon >= 0.9" in member.measured and "(LiRA)" in member.measured
    leaky = {**final, "membership_lira_epsilon_lower_bound": 3.0}
    data = RunData.load(_run(tmp_path / "b", _audited("consistent", 0.7), final=leaky))
    assert [f.status for f in federated_findings(data) if "membership" in f.area] == ["violated"]
