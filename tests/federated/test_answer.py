"""The first section of a federated page answers the scenario's question in numbers (issue 38, item 5)."""

from __future__ import annotations

import re

from testbed.federated.answer import AnswerSection, still_rising
from testbed.kinds import report_layout
from testbed.report.render import RunData


def _data(tmp_path, federated, rounds, final=None, report="robustness") -> RunData:
    return RunData(tmp_path, {"kind": "federated", "federated": federated, "report": {"kind": report}}, rounds,
                   {"final_metrics": final or {}}, {})


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_a_robustness_page_opens_with_each_arms_difference_on_one_seed(tmp_path):
    federated = {"rounds": 3, "strategy": {"name": "sdea"}, "attack": {"name": "lie"},
                 "baselines": ["fedavg", "no_attack"]}
    rounds = [{"round": r, "test_accuracy": a} for r, a in ((1, 0.5), (2, 0.6), (3, 0.7))]
    final = {"baselines.fedavg.test_accuracy": 0.55, "baselines.no_attack.test_accuracy": 0.75}

    text = _text(AnswerSection().render(_data(tmp_path, federated, rounds, final), tmp_path))

    assert "sdea vs fedavg under lie: final test accuracy 0.7000 vs 0.5500, difference +0.1500" in text
    assert "cost of the attack: 0.7500 without attackers, 0.7000 under lie: -0.0500" in text
    assert text.count("1 seed: no interval") == 2


def test_a_page_without_baselines_says_what_would_compare_it(tmp_path):
    rounds = [{"round": 1, "test_accuracy": 0.4}]
    text = _text(AnswerSection().render(_data(tmp_path, {"strategy": {"name": "fedavg"}}, rounds), tmp_path))

    assert "fedavg without attackers: final test accuracy 0.4000 (1 seed: no interval" in text
    assert "federated.baselines: [fedavg, no_attack]" in text


def test_accuracy_still_rising_at_the_end_is_said_and_a_plateau_is_not():
    assert "+0.100 over the last 3 rounds" in still_rising([0.1, 0.5, 0.55, 0.6, 0.6])
    assert still_rising([0.5, 0.6, 0.6, 0.6, 0.605]) == ""
    assert still_rising([0.1, 0.9]) == ""  # too few rounds to tell


def test_a_privacy_page_opens_with_epsilon_its_audit_and_the_utility_cost(tmp_path):
    federated = {"rounds": 15, "strategy": {"name": "fedavg"}, "baselines": ["no_privacy"],
                 "privacy": {"mode": "central", "noise_multiplier": 1.0, "clipping_norm": 1.0, "delta": 1e-5}}
    rounds = [{"round": 12, "test_accuracy": 0.6, "epsilon": 2.5, "privacy.audit.verdict": "consistent",
               "privacy.audit.epsilon_lower_bound": 0.8, "privacy.audit.power": 4.4}]
    final = {"baselines.no_privacy.test_accuracy": 0.8, "membership_loss_tpr_at_1pct": 0.02,
             "membership_lira_tpr_at_1pct": 0.04, "membership_lira_epsilon_lower_bound": 0.3,
             "membership_epsilon_ceiling": 4.4}

    text = _text(AnswerSection().render(_data(tmp_path, federated, rounds, final, "privacy"), tmp_path))

    assert "epsilon 2.5 at delta 1e-05 after 12 of 15 rounds" in text
    assert ("consistent: empirical lower bound 0.8 (the audit could show at most 4.4) against the accountant's 2.5"
            in text)
    assert "test accuracy 0.6000 with privacy, 0.8000 without (same rounds, same seed): -0.2000" in text
    assert ("TPR at 1% FPR 0.020 (loss threshold), 0.040 (offline LiRA); it shows epsilon >= 0.3; with its "
            "candidates it could show at most 4.4, against the accountant's 2.5") in text


def test_a_federated_privacy_report_puts_privacy_first_and_a_robustness_report_the_comparison():
    privacy, robustness = report_layout("privacy", "federated"), report_layout("robustness", "federated")
    assert privacy is not None and robustness is not None

    assert [s.title for s in privacy.after_summary[:3]] == ["Answer", "Privacy", "Baselines"]
    assert [s.title for s in robustness.after_summary[:3]] == ["Answer", "Baselines", "Robustness"]
    decentralized = report_layout("privacy", "decentralized")
    assert decentralized is not None and "Answer" not in [s.title for s in decentralized.after_summary]


def test_accuracy_charts_draw_the_chance_line_of_the_runs_classes(tmp_path, monkeypatch):
    import numpy as np

    from testbed.report import sections

    drawn: dict[str, float | None] = {}
    monkeypatch.setattr(sections, "plot_curve", lambda path, title, *a, chance=None, **k: drawn.update({title: chance}))
    rounds = [{"round": r, "test_accuracy": 0.1 * r, "test_loss": 2.0 / r} for r in (1, 2, 3)]
    data = _data(tmp_path, {"strategy": {"name": "fedavg"}}, rounds)
    data.artifacts["label_histograms"] = np.ones((4, 10))  # 4 clients, 10 classes

    sections.MetricCurvesSection().render(data, tmp_path)

    assert drawn == {"test accuracy": 0.1, "test loss": None}
    assert sections.chance_accuracy(_data(tmp_path, {}, rounds)) is None  # no classes recorded, no line
