"""The audit hook: an audit a workload declares (`Workload.audits`, a built-in's ``AUDITS``) is what the
scenario's report block, a kind's run and the report get, found through the workloads registry
(`testbed.workloads.audits`).

A probe audit stands in for OODRobustBench's in the ``oodrobust`` workload's declaration: every test fails
if the schema, the loader, the run or the report used a config, kinds or section of their own.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import Field

from testbed.config import StrictModel
from testbed.errors import ScenarioError
from testbed.loading import validate_raw
from testbed.report.render import RunData
from testbed.report.sections import ReportSection
from testbed.run import RunFolder
from testbed.scenario import ReportConfig, Scenario
from testbed.seeding import SeedTree
from testbed.workloads.audits import Audit, AuditSections, run_audits
from testbed.workloads.oodrobust import config as oodrobust_config
from tests.core.test_bad_input_corpus import Case, assert_refused_cleanly

WORKLOAD = {"name": "t", "kind": "workload", "data": {"dataset": "digits"}, "workload": {"name": "classifier"}}
FEDERATED = {"name": "t", "kind": "federated", "data": {"dataset": "digits", "num_clients": 2},
             "workload": {"name": "classifier"}, "federated": {"rounds": 1}}


class ProbeConfig(StrictModel):
    """A config no built-in audit has."""

    threshold: float = Field(0.5, gt=0)


class ProbeSection(ReportSection):
    """Shows the probe's one metric."""

    title = "Probe audit"

    def render(self, data: RunData, out_dir: Path) -> str:
        metrics = (data.summary or {}).get("final_metrics", {})
        return f"<p>norm {metrics['probe_norm']:.3f}</p>" if "probe_norm" in metrics else ""


class ProbeAudit(Audit):
    """Serves workload-kind runs with training reports (OODRobustBench's serves federated robustness reports)."""

    name = "ood"
    Config = ProbeConfig
    kinds = ("workload",)
    report_kind = "training"
    section = ProbeSection()
    seen: list[Any] = []

    @classmethod
    def run(cls, model, test_set, config, seeds):
        cls.seen.append((config, seeds.integer("report.ood")))
        norm = float(sum(p.detach().abs().sum() for p in model.parameters()))
        return {"probe_norm": norm * config.threshold}, {"probe_labels": np.asarray(test_set)}


PROBE = f"{__name__}:ProbeAudit"  # as a built-in workload's config module names an audit


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setattr(oodrobust_config, "AUDITS", {"ood": PROBE})
    ProbeAudit.seen = []
    return ProbeAudit


def test_the_report_block_is_validated_by_the_config_of_the_audit_the_workload_offers(probe):
    with pytest.raises(ScenarioError, match=r"s\.yaml: report\.ood\.threshold: Input should be greater than 0"):
        validate_raw({**WORKLOAD, "report": {"ood": {"threshold": -1}}}, "s.yaml")
    with pytest.raises(ScenarioError, match=r"report\.ood\.epsilon: unknown key; valid keys: threshold$"):
        validate_raw({**WORKLOAD, "report": {"ood": {"epsilon": 0.1}}}, "s.yaml")
    scenario = validate_raw({**WORKLOAD, "report": {"ood": {"threshold": 2}}}, "s.yaml")
    assert scenario.report.ood == ProbeConfig(threshold=2)
    assert scenario.model_dump(mode="json")["report"]["ood"] == {"threshold": 2.0}  # the resolved config.yaml


def test_an_audit_serves_only_the_kinds_and_report_it_declares(probe):
    with pytest.raises(ScenarioError, match="report: ood: set only in kind: workload scenarios with report kind: "
                                            "training$"):
        validate_raw({**FEDERATED, "report": {"kind": "robustness", "ood": {}}}, "s.yaml")
    assert validate_raw({**WORKLOAD, "report": {"ood": {}}}, "s.yaml").report.ood == ProbeConfig()


def test_a_workload_offers_an_audit_under_a_new_name_with_no_field_in_the_schema(monkeypatch):
    monkeypatch.setattr(oodrobust_config, "AUDITS", {"leakage": PROBE})
    assert "leakage" not in ReportConfig.model_fields
    scenario = validate_raw({**WORKLOAD, "report": {"leakage": {"threshold": 3}}}, "s.yaml")
    assert scenario.report.audit_blocks() == {"leakage": ProbeConfig(threshold=3)}
    with pytest.raises(ScenarioError, match=r"report\.leakag: unknown key \(did you mean 'leakage'\?\)"):
        validate_raw({**WORKLOAD, "report": {"leakag": {}}}, "s.yaml")


CASES = [
    Case("report-ood-offered-by-no-workload", "workload", {"report": {"ood": {}}},
         ("report.ood", "unknown key", "valid keys: kind, trackers, tracking, membership")),
    Case("report-ood-set-offered-by-no-workload", "workload", ["report.ood.threshold=1"],
         ("--set report.ood.threshold=1", "report.ood", "unknown key")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_an_audit_no_workload_offers_is_refused_in_one_line(cli, tmp_path, monkeypatch, case):
    monkeypatch.setattr(oodrobust_config, "AUDITS", {})
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


def test_a_run_gets_the_audit_metrics_and_keeps_its_artifacts(probe, tmp_path):
    run = RunFolder.create(tmp_path / "run", {"name": "t"})
    run.write_artifacts({"label_histograms": np.eye(3)})
    # The scenario as a worker validates it from JSON (schema only): the block is still a mapping.
    scenario = Scenario.model_validate({**WORKLOAD, "seed": 4, "report": {"ood": {"threshold": 2}}})
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.constant_(model.weight, -0.25)
    metrics = run_audits(SimpleNamespace(scenario=scenario, run=run, seeds=SeedTree(4)), model, [3, 1, 2])
    assert metrics == {"probe_norm": pytest.approx(1.0)}
    arrays = run.read_artifacts()
    assert arrays.keys() == {"label_histograms", "probe_labels"} and arrays["probe_labels"].tolist() == [3, 1, 2]
    config, seed = probe.seen[0]
    assert config == ProbeConfig(threshold=2) and seed == SeedTree(4).integer("report.ood")


def test_the_report_renders_the_section_of_each_audit_the_run_switched_on(probe, tmp_path):
    summary = {"final_metrics": {"probe_norm": 1.5}}
    on = RunData(tmp_path, {"report": {"kind": "training", "ood": {"threshold": 2.0}}}, [], summary, {})
    assert AuditSections().render(on, tmp_path) == "<h2>Probe audit</h2><p>norm 1.500</p>"
    off = RunData(tmp_path, {"report": {"kind": "training", "ood": None}}, [], summary, {})
    assert AuditSections().render(off, tmp_path) == ""
