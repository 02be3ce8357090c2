"""The privacy page answers first (issue 38): epsilon spent, its audit verdict and the utility cost
lead; verdicts are collapsed per algorithm; flat matrices and curves are said, not drawn; one chart
per measure over data passes; and the README scenario's audit can test the bound it audits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from testbed.cli import main
from testbed.decentralized import report
from testbed.decentralized.audit import audit_power
from testbed.report.render import RunData
from tests.browser import WINDOW, open_report
from tests.conftest import requires_chromium

README = Path(__file__).parents[2] / "scenarios" / "decentralized" / "readme.yaml"
CONFIG = {"kind": "decentralized", "data": {"num_clients": 8}, "decentralized": {
    "privacy": {"target_epsilon": 4.0, "delta": 1e-5},
    "audit": {"canaries": 200, "source": 0, "significance": 0.05}}}


def _data(tmp_path, artifacts: dict | None = None, final: dict | None = None, metrics: list | None = None) -> RunData:
    return RunData(path=tmp_path, config=CONFIG, metrics=metrics or [], summary={"final_metrics": final or {}},
                   artifacts=artifacts or {})


def _audited(alg: str, lower: list[float], upper: list[float]) -> dict:
    """An algorithm's artifacts as a trained, audited run writes them: pairs (0, v) for v = 1, 2, ..."""
    pairs = np.arange(1, len(lower) + 1)
    arrays = {"observer": pairs, "distance": (pairs + 1) // 2, "lower": np.array(lower), "upper": np.array(upper)}
    return {f"{alg}.pairwise_epsilon": np.zeros((2, 2)), **{f"{alg}.audit_{k}": v for k, v in arrays.items()}}


def _rows(page: str) -> int:
    return page.count("<tr>") - page.count("<thead>")


# --- the answer, first ---------------------------------------------------------------------------

def test_the_answer_gives_epsilon_the_audit_verdict_and_the_cost_against_no_noise(tmp_path):
    artifacts = _audited("gossip", [1.0, 0.5, 0.25], [4.0, 4.0, 3.5])
    final = {"gossip.epsilon_at_stop": 4.0, "gossip.audit_power": 5.0, "gossip.test_accuracy": 0.8,
             "nonprivate.gossip.test_accuracy": 0.9, "gossip.test_loss": 0.5, "nonprivate.gossip.test_loss": 0.3}

    page = report.AnswerSection().render(_data(tmp_path, artifacts, final), tmp_path)

    answer = page[page.index('id="privacy-answer"'):]
    assert "consistent on 3 of 3 pairs (lower bound up to 1 &lt;= 4, power 5)" in answer
    assert "0.800 vs 0.900 (-0.100)" in answer and "0.500 vs 0.300 (+0.200)" in answer
    assert _rows(answer) == 1
    assert "cannot test" not in page and "ends above its no-noise run" not in page


def test_a_bound_beyond_the_audit_says_how_many_canaries_would_test_it(tmp_path):
    # Power 2.94 (200 canaries): epsilon 4 needs more canaries; epsilon 8 needs more than any number.
    final = {"random_walk.audit_power": 2.94, "gossip.audit_power": 2.94}
    testable = report.AnswerSection().render(
        _data(tmp_path, _audited("random_walk", [0.3, 0.2], [4.0, 4.0]), final), tmp_path)
    untestable = report.AnswerSection().render(
        _data(tmp_path, _audited("gossip", [0.3], [8.0]), final), tmp_path)

    found = re.search(r"cannot test epsilon 4 \(random walk\): 200 canaries .* at most 2\.94; about (\d+) canaries",
                      testable)
    assert found, testable
    needed = int(found.group(1))
    power = lambda m: audit_power(m, 1e-5, 0.05, included=m // 2)
    assert power(needed) > 4.0 >= power(needed // 2)  # checked by the power function, not by the page
    assert "too weak to test on 2 of 2 pairs (the audit can show at most 2.94 &lt; 4)" in testable
    assert "no number of canaries can at delta 1e-05 (the most, about 5.4" in untestable
    assert "only a smaller epsilon can be tested" in untestable


def test_a_private_arm_above_its_no_noise_run_is_explained_in_one_sentence(tmp_path):
    final = {"gossip.test_accuracy": 0.966, "nonprivate.gossip.test_accuracy": 0.916, "gossip.test_loss": 0.399,
             "nonprivate.gossip.test_loss": 0.356, "gossip.planned_steps": 20, "gossip.stop_step": 20,
             "local_dp.test_accuracy": 0.88, "nonprivate.local_dp.test_accuracy": 0.92}
    artifacts = {"gossip.pairwise_epsilon": np.zeros((2, 2)), "local_dp.pairwise_epsilon": np.zeros((2, 2))}

    page = report.AnswerSection().render(_data(tmp_path, artifacts, final), tmp_path)

    assert page.count("ends above its no-noise run") == 1  # gossip, not local DP (below its reference)
    assert ("gossip ends above its no-noise run in test accuracy (0.966 vs 0.916) while its test loss is worse "
            "(0.399 vs 0.356): both take the same 20 steps at the same step size from the same start") in page
    assert "not privacy improving the model" in page


# --- the evidence, said or drawn once ------------------------------------------------------------

def test_the_audit_table_has_one_row_per_algorithm_and_verdict_with_its_count(tmp_path):
    artifacts = _audited("local_dp", [1.1] * 7, [8.0] * 7) | _audited("gossip", [0.12] * 6 + [9.0], [4.0] * 7)
    final = {"local_dp.audit_power": 2.94, "gossip.audit_power": 5.0}

    page = report.AuditSection().render(_data(tmp_path, artifacts, final), tmp_path)

    table = page[page.index("<table>"):page.index("</table>")]
    assert _rows(table) == 3  # local DP: too weak (7); gossip: violation (1), consistent (6)
    assert "<td>audit too weak to test the bound (it can show at most 2.94)</td><td>7</td>" in table
    assert "<td>VIOLATION (accountant wrong)</td><td>1</td><td>7</td>" in table
    assert "<td>consistent: tightness lower/upper = 0.03</td><td>6</td><td>1, 2, 3, 4, 5, 6</td>" in table
    assert "gossip: 7 pairs: 1 violation, 6 consistent" in page


def test_a_flat_epsilon_by_distance_is_said_not_drawn(tmp_path):
    flat = {"distance": np.array([1, 2, 3]), "distance_mean": np.array([8.0, 8.0, 7.978]),
            "distance_min": np.array([8.0, 8.0, 7.978]), "distance_max": np.array([8.0, 8.0, 7.978])}
    artifacts = {f"random_walk.{k}": v for k, v in flat.items()} | {"random_walk.pairwise_epsilon": np.zeros((2, 2))}
    final = {"random_walk.sigma_calibrated": True}

    page = report.DistanceSection().render(_data(tmp_path, artifacts, final), tmp_path)

    assert not (tmp_path / "distance-trained.png").exists()
    assert "every trained algorithm's pairs end within 7.978-8.000 at every distance" in page
    assert "flat by construction" in page


def test_training_is_one_chart_per_measure_in_data_passes(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(report.pyplot(), "close", figures.append)
    metrics = [{"algorithm": "random_walk", "step": s, "random_walk.test_loss": 0.7 - s / 1000}
               for s in (0, 80, 160)]
    metrics += [{"algorithm": name, "step": s, f"{name}.test_loss": 0.7 - s / 100}
                for name in ("gossip", "nonprivate.gossip") for s in (0, 10, 20)]

    page = report.TrainingSection().render(_data(tmp_path, metrics=metrics), tmp_path)

    assert len(figures) == 1 and (tmp_path / "training-test_loss.png").exists()
    axes = figures[0].axes[0]
    lines = {line.get_label(): list(line.get_xdata()) for line in axes.lines}
    assert lines == {"random walk": [0, 10, 20], "gossip": [0, 10, 20], "gossip, no noise": [0, 10, 20]}
    assert axes.get_xlabel().startswith("data passes")
    assert "dashed: the same algorithm with no noise" in page
    # the generic curves (over "step") leave these metrics to this chart
    assert {"random_walk.test_loss", "nonprivate.gossip.test_accuracy", "gossip.epsilon"} <= report.LAYOUT.covered


def test_the_page_answers_first_and_puts_the_heatmap_before_the_audit_table():
    titles = [section.title for section in report.LAYOUT.after_summary]

    assert titles[0] == report.AnswerSection.title
    assert titles.index("Pairwise epsilon") < titles.index(report.AuditSection.title)


# --- the README scenario -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def readme_run(tmp_path_factory) -> Path:
    """The README's decentralized scenario, run once (seconds)."""
    run = tmp_path_factory.mktemp("readme") / "run"
    assert main(["run", str(README), "--run-dir", str(run), "--quiet"]) == 0
    return run


@pytest.mark.integration
def test_the_readme_audit_tests_its_bound_for_some_arm(readme_run):
    final = json.loads((readme_run / "summary.json").read_text())["final_metrics"]
    arms = ("random_walk", "gossip", "local_dp")

    testable = [a for a in arms if final[f"{a}.audit_power"] >= final[f"{a}.epsilon_at_stop"]]

    assert testable, {a: (final[f"{a}.audit_power"], final[f"{a}.epsilon_at_stop"]) for a in arms}
    assert all(final[f"{a}.audit_max_lower"] <= final[f"{a}.epsilon_at_stop"] for a in arms)  # no violation
    page = (readme_run / "report" / "index.html").read_text()
    assert "consistent on 7 of 7 pairs" in page
    assert "audit too weak to test the bound" not in page


@pytest.mark.integration
@requires_chromium
def test_the_readme_privacy_answer_is_on_the_first_screen_in_headless_chromium(readme_run):
    page = open_report(readme_run / "report")

    assert page.sections[0] == report.AnswerSection.title
    # The heading, its sentence and the answer's three rows (about 250 px) within the first screen.
    assert page.section_tops[0] + 250 < WINDOW[1], page.section_tops
    assert all(i["ok"] for i in page.images) and not page.empty
