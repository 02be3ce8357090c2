"""Membership inference on the final global model (`testbed.workloads.classifier.membership`): its
statistics against closed forms and an independent reference, the attacks on a model that memorised
its members and on one that never saw them, the config's refusals, and a tiny federated run that
records the metrics and renders the section."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from scipy.stats import mannwhitneyu

from testbed.data import Dataset
from testbed.report.render import RunData
from testbed.scenario import Scenario
from testbed.seeding import SeedTree
from testbed.workloads.classifier.config import ClassifierConfig
from testbed.workloads.classifier.membership import (
    MembershipAudit,
    MembershipConfig,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_from_counts,
    epsilon_lower_bound,
    roc,
    tpr_at_fpr,
)
from testbed.workloads.classifier.membership_report import MembershipSection
from testbed.workloads.classifier.model import build_classifier, make_optimizer, train_epochs
from tests.core.test_bad_input_corpus import Case, Replace, assert_refused_cleanly

# --- statistics ------------------------------------------------------------------------------------


def test_tpr_at_a_low_fpr_counts_the_members_above_the_non_members_it_lets_through():
    non_members = np.arange(100.0)  # 0 .. 99
    members = np.array([99.5, 98.5, 97.5, 50.0])
    # 1% of 100 non-members: one may score above the threshold (99), so the threshold is 98.
    assert tpr_at_fpr(members, non_members, 0.01) == pytest.approx(2 / 4)
    # 0.1% of 100 is below one non-member: zero false positives, the threshold is the highest non-member.
    assert tpr_at_fpr(members, non_members, 0.001) == pytest.approx(1 / 4)
    assert tpr_at_fpr(members, non_members, 0.05) == pytest.approx(3 / 4)


def test_the_auc_is_the_mann_whitney_statistic():
    rng = np.random.default_rng(0)
    members, non_members = rng.normal(0.5, 1, 300), rng.normal(0, 1, 200)
    fpr, tpr, auc = roc(members, non_members)
    assert auc == pytest.approx(mannwhitneyu(members, non_members).statistic / (300 * 200))
    assert fpr[0] == 0 and tpr[-1] == 1 and np.all(np.diff(fpr) >= 0)


def test_clopper_pearson_bounds_lie_on_either_side_of_the_rate_and_match_the_closed_forms():
    alpha = 0.01
    assert clopper_pearson_lower(30, 100, alpha) < 0.3 < clopper_pearson_upper(30, 100, alpha)
    # No success: the upper bound solves (1 - p)^n = alpha; all successes: the lower bound solves p^n = alpha.
    assert clopper_pearson_upper(0, 500, alpha) == pytest.approx(1 - alpha ** (1 / 500))
    assert clopper_pearson_lower(500, 500, alpha) == pytest.approx(alpha ** (1 / 500))
    assert clopper_pearson_lower(0, 500, alpha) == 0 and clopper_pearson_upper(500, 500, alpha) == 1
    # More confidence, a wider interval.
    assert clopper_pearson_lower(30, 100, 0.001) < clopper_pearson_lower(30, 100, 0.05)
    assert clopper_pearson_upper(30, 100, 0.001) > clopper_pearson_upper(30, 100, 0.05)


def test_the_epsilon_bound_from_counts_is_the_dp_inequality_at_the_pessimistic_rates():
    alpha, n = 0.05 / 8, 500
    low, high = alpha ** (1 / n), 1 - alpha ** (1 / n)  # every member caught, no non-member through
    assert epsilon_from_counts(n, n, 0, n, 0.0, alpha) == pytest.approx(math.log(low / high))
    assert epsilon_from_counts(n, n, 0, n, 1e-5, alpha) == pytest.approx(math.log((low - 1e-5) / high))
    # A test no better than a guess proves nothing; a lower TPR bound below delta neither.
    assert epsilon_from_counts(50, n, 50, n, 0.0, alpha) == 0
    assert epsilon_from_counts(3, n, 0, n, 0.5, alpha) == 0


def test_the_epsilon_lower_bound_of_separated_scores_is_positive_and_of_mixed_ones_zero():
    rng = np.random.default_rng(1)
    assert epsilon_lower_bound(rng.normal(10, 1, 500), rng.normal(0, 1, 500), 0.0, 0.05) > 3
    assert epsilon_lower_bound(rng.normal(0, 1, 500), rng.normal(0, 1, 500), 0.0, 0.05) == 0


# --- the attacks on models ---------------------------------------------------------------------------

FEATURES = 32
PARAMS = {"arch": "mlp", "hidden": 128, "lr": 0.1}


def _random_labels(count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset("noise", rng.normal(size=(count, FEATURES)).astype(np.float32),
                   rng.integers(0, 10, size=count).astype(np.int64), 10, None)


def _scenario() -> Scenario:
    return Scenario.model_validate({"name": "m", "kind": "federated", "data": {"dataset": "digits"},
                                    "workload": {"name": "classifier", **PARAMS}, "federated": {"rounds": 1}})


def _trained(data: Dataset, epochs: int) -> torch.nn.Module:
    config = ClassifierConfig.model_validate(PARAMS)
    torch.manual_seed(0)
    model = build_classifier(config, data)
    train_epochs(model, make_optimizer(model, config), data, epochs, 32, torch.Generator().manual_seed(0))
    return model


def _audit(model: torch.nn.Module, members: Dataset, others: Dataset) -> dict[str, float]:
    config = MembershipConfig(candidates=100, shadow_epochs=150)
    metrics, arrays = MembershipAudit.run(model, others, config, SeedTree(3), members=members, scenario=_scenario())
    assert metrics["membership_candidates"] == 100 and {"membership_lira_fpr", "membership_loss_tpr"} <= arrays.keys()
    return metrics


def test_a_model_that_memorised_its_members_is_caught_by_both_attacks():
    members = _random_labels(100, seed=10)  # random labels: only memorising fits them
    model = _trained(members, epochs=150)
    metrics = _audit(model, members, _random_labels(300, seed=11))  # 100 unseen candidates, 200 for the shadows
    for attack in ("loss", "lira"):
        assert metrics[f"membership_{attack}_tpr_at_1pct"] > 0.5, metrics
        assert metrics[f"membership_{attack}_auc"] > 0.9, metrics
        assert metrics[f"membership_{attack}_epsilon_lower_bound"] > 1, metrics


def test_a_model_that_saw_none_of_the_members_proves_no_epsilon():
    model = _trained(_random_labels(100, seed=20), epochs=150)
    # Members and non-members from the same distribution, neither trained on: no attack can tell them apart.
    metrics = _audit(model, _random_labels(100, seed=21), _random_labels(300, seed=22))
    for attack in ("loss", "lira"):
        assert metrics[f"membership_{attack}_epsilon_lower_bound"] == 0, metrics
        assert metrics[f"membership_{attack}_tpr_at_1pct"] < 0.1, metrics


def test_the_section_puts_the_accountant_beside_the_bound_and_draws_the_roc(tmp_path):
    final = {"membership_candidates": 500.0, "membership_delta": 1e-5, "membership_epsilon_ceiling": 4.1}
    for attack, bound in (("loss", 0.21), ("lira", 0.43)):
        final |= {f"membership_{attack}_tpr_at_0_1pct": 0.004, f"membership_{attack}_tpr_at_1pct": 0.03,
                  f"membership_{attack}_auc": 0.55, f"membership_{attack}_epsilon_lower_bound": bound}
    curve = {f"membership_{a}_{k}": np.linspace(0, 1, 5) for a in ("loss", "lira") for k in ("fpr", "tpr")}
    records = [{"round": 1, "epsilon": 1.5}, {"round": 2, "epsilon": 2.1}]
    data = RunData(tmp_path, {"report": {"kind": "privacy", "membership": {"significance": 0.05}}}, records,
                   {"final_metrics": final}, curve)
    page = MembershipSection().render(data, tmp_path)
    assert "accountant: 2.1; membership inference shows &gt;= 0.43 (at 95% confidence)" in page
    assert "below 1/500" in page and (tmp_path / "membership-roc.png").is_file()
    no_dp = MembershipSection().render(RunData(tmp_path, {"report": {}}, [], {"final_metrics": final}, curve), tmp_path)
    assert "no accountant" in no_dp
    # An accountant below what the attack proves is a violation; a ceiling below it, an audit too weak to test it.
    below = RunData(tmp_path, {"report": {}}, [{"round": 1, "epsilon": 0.3}], {"final_metrics": final}, curve)
    assert "shows &gt;= 0.43 (at 95% confidence): a violation" in MembershipSection().render(below, tmp_path)
    above = RunData(tmp_path, {"report": {}}, [{"round": 1, "epsilon": 9.0}], {"final_metrics": final}, curve)
    assert "at most 4.1, too few to test the accountant's bound" in MembershipSection().render(above, tmp_path)
    assert MembershipSection().render(RunData(tmp_path, {}, records, {"final_metrics": {}}, {}), tmp_path) == ""


# --- the config's refusals -------------------------------------------------------------------------------

CASES = [
    Case("report-membership-one-shadow", "federated",
         {"report": {"kind": "privacy", "membership": {"shadow_models": 1}}},
         ("report.membership.shadow_models", "greater than or equal to 2")),
    Case("report-membership-set-variance", "federated",
         ["report.kind=privacy", "report.membership.variance=median"],
         ("--set report.membership.variance=median", "report.membership.variance", "global")),
    Case("report-membership-robustness-report", "federated", {"report": {"kind": "robustness", "membership": {}}},
         ("report: membership: set only in kind: federated", "report kind: privacy")),
    Case("report-membership-not-a-classifier", "federated",
         {"data": {"dataset": "moving_digits"}, "workload": Replace({"name": "stc"}),
          "report": {"kind": "privacy", "membership": {}}},
         ("report.membership", "workload 'stc' is no classifier")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_membership_block_is_refused_in_one_line(cli, tmp_path, monkeypatch, case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)


# --- a tiny federated run ------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_federated_run_records_the_membership_metrics_and_renders_the_section(tmp_path):
    scenario = {"name": "membership-tiny", "kind": "federated", "seed": 2,
                "engine": {"type": "local", "num_cpus": 1},
                "data": {"dataset": "digits", "num_clients": 2},
                "workload": {"name": "classifier", "arch": "mlp", "hidden": 16},
                "federated": {"rounds": 2, "local_epochs": 1, "strategy": {"name": "fedavg"}},
                "report": {"kind": "privacy", "membership": {"candidates": 100, "shadow_models": 2}}}
    path, run_dir = tmp_path / "s.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(scenario))
    env = {**os.environ, "CI": "1"}
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(run_dir), "--quiet"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads((run_dir / "summary.json").read_text())["final_metrics"]
    assert final["membership_candidates"] == 100
    for attack in ("loss", "lira"):
        assert 0 <= final[f"membership_{attack}_tpr_at_1pct"] <= 1 and 0 <= final[f"membership_{attack}_auc"] <= 1
        assert final[f"membership_{attack}_epsilon_lower_bound"] >= 0
    page = (run_dir / "report" / "index.html").read_text()
    assert "Membership inference (final global model)" in page and "membership-roc.png" in page
    assert "no accountant" in page
