"""A built-in workload declares once, in its torch-free config module, what the registry must tell
without its model code (issue 39 item 1, issue 41): the kinds it runs under (``KINDS``) and the
audits it offers (``AUDITS``). Its class takes them when it is created, and fails at import where its
base class disagrees; finding an audit or refusing a report block imports no workload's model code,
and says what it said when it did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.test_bad_input_corpus import Case, Replace, _assert_one_line_naming, _prepare

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "flwr", "ray", "deepspeed")


def _builtin_class(name: str, base: type, **body: object) -> type:
    """A class created as workload ``name``'s own module creates its class (the registry's rule)."""
    return type("Declared", (base,), {"name": name, "__module__": f"testbed.workloads.{name}.workload", **body})


def test_a_builtin_class_that_is_no_federated_workload_under_a_federated_config_fails_at_import():
    from testbed.workloads.base import Workload

    with pytest.raises(TypeError, match=r"testbed\.workloads\.stc\.config declares KINDS = \('workload', "
                                        r"'federated'\); a workload runs under kind: federated exactly when"):
        _builtin_class("stc", Workload)


def test_a_builtin_federated_class_under_a_workload_only_config_fails_at_import():
    from testbed.workloads.base import FederatedWorkload

    with pytest.raises(TypeError, match=r"testbed\.workloads\.aco\.config declares KINDS = \('workload',\)"):
        _builtin_class("aco", FederatedWorkload)


def test_a_builtin_class_declares_no_audits_of_its_own():
    from testbed.workloads.base import Workload

    with pytest.raises(TypeError, match=r"declares its audits in testbed\.workloads\.aco\.config \(AUDITS\)"):
        _builtin_class("aco", Workload, audits={})


def test_a_builtin_class_takes_the_audits_its_config_module_names(monkeypatch):
    from testbed.workloads.aco import config
    from testbed.workloads.base import Workload
    from testbed.workloads.classifier.membership import MembershipAudit
    from testbed.workloads.oodrobust.audit import OodAudit
    from testbed.workloads.registry import workload_class

    monkeypatch.setattr(config, "AUDITS", {"leakage": "testbed.workloads.oodrobust.audit:OodAudit"}, raising=False)
    assert _builtin_class("aco", Workload).audits == {"leakage": OodAudit}
    assert workload_class("classifier").audits == {"membership": MembershipAudit}
    assert workload_class("bisam").audits == {"membership": MembershipAudit}  # a classifier too
    assert workload_class("oodrobust").audits == {"ood": OodAudit}


def test_an_audits_entry_that_names_no_audit_is_refused(monkeypatch):
    from testbed.workloads.audits import find_audit
    from testbed.workloads.classifier import config

    monkeypatch.setattr(config, "AUDITS", {"membership": "testbed.workloads.classifier.config:ClassifierConfig"})
    monkeypatch.setattr("testbed.workloads.bisam.config.AUDITS", {})
    with pytest.raises(TypeError, match=r"workload 'classifier' offers as audit 'membership' <class 'testbed\."
                                        r"workloads\.classifier\.config\.ClassifierConfig'>, which is no Audit "
                                        r"subclass"):
        find_audit("membership")


def test_finding_and_checking_an_audit_imports_no_workload_class(monkeypatch):
    from testbed.workloads import registry
    from testbed.workloads.audits import find_audit, offered_audits
    from testbed.workloads.classifier.membership import MembershipAudit, MembershipConfig

    monkeypatch.setattr(registry, "workload_class", lambda name: pytest.fail(f"{name}'s model code was imported"))
    assert offered_audits() == ["membership", "ood"]
    assert find_audit("membership") is MembershipAudit and find_audit("nope") is None
    stc = type("Scenario", (), {"workload": type("Block", (), {"name": "stc"})()})()
    with pytest.raises(ValueError, match="workload 'stc' is no classifier that offers it"):
        MembershipAudit.check(MembershipConfig(), None, scenario=stc)


# --- the audits' refusals, torch-free and in the words they had ------------------------------------

F, W = "federated", "workload"
PRIVACY = {"kind": "privacy", "membership": {}}
CASES = [
    Case("report-audit-misspelt", F, {"report": {"membershp": {}}},
         ("report.membershp: unknown key (did you mean 'membership'?); valid keys: kind, trackers, tracking, "
          "membership, ood",)),
    Case("report-membership-in-workload-kind", W, {"report": PRIVACY},
         ("report: membership: set only in kind: federated scenarios with report kind: privacy",)),
    Case("report-ood-in-training-report", F, {"report": {"kind": "training", "ood": {}}},
         ("report: ood: set only in kind: federated scenarios with report kind: robustness",)),
    Case("report-membership-candidates-zero", F, ["report.kind=privacy", "report.membership.candidates=0"],
         ("--set report.membership.candidates=0", "report.membership.candidates: Input should be greater than 0")),
    Case("report-membership-on-stc", F, {"data": {"dataset": "moving_digits"}, "workload": Replace({"name": "stc"}),
                                         "report": PRIVACY},
         ("report.membership: membership inference scores a classifier's class probabilities; workload 'stc' is "
          "no classifier that offers it",)),
]

# Validates the scenario, then prints the heavy modules loaded as the last line of stdout.
CHILD = f"""
import json, sys
from testbed.cli import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})}}))
"""


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_an_audit_block_is_refused_in_its_one_line_without_torch(tmp_path: Path, case: Case):
    path, overrides = _prepare(case, tmp_path)
    done = subprocess.run([sys.executable, "-c", CHILD, "validate", str(path), *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 2, done.stderr[-3000:]
    _assert_one_line_naming(done.stderr, path, overrides, case.words)
    assert result["heavy"] == [], result["heavy"][:5]
