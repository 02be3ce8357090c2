"""How verdicts are called and shown (issue 40): one interval rule for preconditions and predicates,
the predicate's own call beside an inconclusive row, seed counts, exact rows, Benjamini-Hochberg
q-values over all rows, and the seeds a tie would need.

Each case goes through a tiny result file (`testbed.claims.results`), `evaluate` and `write_docs`,
and checks the index (``reproduction.md``) and the paper's page both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.claims import docs, results
from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import Verdict, evaluate, with_q_values
from testbed.claims.statistics import q_values, seeds_needed, t_test_power
from testbed.errors import ScenarioError

SEEDS = range(5)
SPREAD = [-2.0, -1.0, 0.0, 1.0, 2.0]  # standard deviation sqrt(2.5): scaled below to a chosen one


@dataclass(frozen=True)
class Scenario:
    """What the docs need of a scenario: its path and claims block."""

    path: str
    claims: ClaimsConfig


def _claims(*statements: dict[str, Any], **extra: Any) -> ClaimsConfig:
    return ClaimsConfig.model_validate({
        "paper": "bisam", "arms": {arm: {"workload.variant": arm} for arm in ("a", "b", "base")},
        "statements": [{"id": f"s{i}", "quote": f"quote {i}", "source": "Table 1", **s}
                       for i, s in enumerate(statements)], **extra})


def _variants() -> dict[str, dict[str, Any]]:
    return {f"{arm}{seed}": {"seed": seed, "workload": {"variant": arm}}
            for arm in ("a", "b", "base") for seed in SEEDS}


def _from_result_file(tmp_path: Path, claims: ClaimsConfig,
                      values: dict[str, dict[str, list[float]]]) -> tuple[list[Verdict], dict[str, Any]]:
    """Write ``values`` (arm -> metric -> one value per seed) as a result file, read it back and
    evaluate the claims on it, as ``testbed reproduce --docs-only`` does."""
    variants = _variants()
    records = {slug: {"seed": raw["seed"], "config": results.variant_hash(raw), "wall_s": 1.0, "commit": "abc1234",
                      "final_metrics": {metric: per_seed[raw["seed"]]
                                        for metric, per_seed in values[raw["workload"]["variant"]].items()}}
               for slug, raw in variants.items()}
    path = tmp_path / "results" / "tiny.json"
    results.write_results(path, "scenarios/tiny.yaml", records)
    kept = results.current(results.read_results(path), variants)
    verdicts = evaluate(claims, variants, {slug: r["final_metrics"] for slug, r in kept.items()}, "tiny.yaml")
    return verdicts, kept


def _render(tmp_path: Path, claims: ClaimsConfig, values: dict[str, dict[str, list[float]]]) -> tuple[str, str]:
    """The index and the paper page that the result file gives: ``(row of s0 in the index, row of s0
    in the page)`` for a one-statement block, else the whole texts."""
    verdicts, records = _from_result_file(tmp_path, claims, values)
    docs.write_docs(tmp_path / "docs", {"bisam": [(Scenario("tiny.yaml", claims), verdicts, records)]}, "full")
    index = (tmp_path / "docs" / "reproduction.md").read_text()
    page = (tmp_path / "docs" / "reproduction" / "bisam.md").read_text()
    if len(claims.statements) > 1:
        return index, page
    return _row(index, "| s0 |"), _row(page, "| s0 |")


def _row(text: str, start: str) -> str:
    [row] = [line for line in text.splitlines() if start in line]
    return row


def _margins(mean: float, sd: float) -> list[float]:
    """Five margins with exactly this mean and (n - 1) standard deviation."""
    return [mean + sd * s / math.sqrt(2.5) for s in SPREAD]


def _arms(a: list[float], b: list[float] | None = None,
          base: list[float] | None = None) -> dict[str, dict[str, list[float]]]:
    zero = [0.0] * 5
    return {"a": {"acc": a}, "b": {"acc": b or zero}, "base": {"acc": base or zero}}


def test_a_precondition_holding_on_the_mean_but_not_on_its_interval_makes_the_row_inconclusive(tmp_path):
    # b - base: mean 0.07 > 0.05, but 0.0 .. 0.15 over the seeds: the interval covers 0.05.
    b = [0.50, 0.65, 0.52, 0.63, 0.55]
    claims = _claims({"predicate": "a.acc > b.acc", "precondition": "b.acc - base.acc > 0.05"})
    values = _arms(a=[x + 0.1 for x in b], b=b, base=[0.5] * 5)

    [verdict], _ = _from_result_file(tmp_path, claims, values)
    [group] = verdict.groups
    assert group.precondition is not None and group.precondition.interval is not None
    assert group.precondition.interval.mean == pytest.approx(0.02) and group.precondition.interval.low < 0
    assert group.precondition_holds is False and verdict.verdict == "inconclusive"
    assert group.predicate_verdict == "reproduced"  # a +0.1 on every seed: kept beside the verdict

    index, page = _render(tmp_path, claims, values)
    for row in (index, page):
        assert "(**fails**)" in row
        assert "inconclusive: precondition failed; the predicate itself favours the claim (5 of 5 seeds" in row
    assert "interval above zero" in (tmp_path / "docs" / "reproduction.md").read_text()  # the rule, in the legend


def test_a_precondition_whose_interval_is_above_zero_holds(tmp_path):
    claims = _claims({"predicate": "a.acc > b.acc", "precondition": "b.acc - base.acc > 0.05"})
    b = [0.60, 0.61, 0.62, 0.63, 0.64]
    [verdict], _ = _from_result_file(tmp_path, claims, _arms(a=[x + 0.1 for x in b], b=b, base=[0.5] * 5))
    assert verdict.groups[0].precondition_holds is True and verdict.verdict == "reproduced"


def test_an_inconclusive_row_shows_that_its_predicate_is_significantly_against_the_claim(tmp_path):
    # The precondition fails outright; a loses to b by 0.2 on every seed, all the same.
    b = [0.60, 0.61, 0.62, 0.63, 0.64]
    claims = _claims({"predicate": "a.acc > b.acc", "precondition": "b.acc - base.acc > 0.5"})
    values = _arms(a=[x - 0.2 + 0.01 * (i % 2) for i, x in enumerate(b)], b=b, base=[0.5] * 5)

    index, page = _render(tmp_path, claims, values)

    for row in (index, page):
        assert "inconclusive: precondition failed; the predicate itself is against the claim" in row
        assert "0 of 5 seeds favour the claim" in row
        assert "`a.acc > b.acc`: 0.424 vs 0.62, margin -0.196 [-0.2028, -0.1892]" in row  # its numbers, in both
    assert "precondition `b.acc - base.acc > 0.5`" in index


def test_every_verdict_says_how_many_seeds_favour_the_claim_and_a_one_sided_tie_says_so(tmp_path):
    # Every seed loses, but one loses by far more than the others: the interval covers zero.
    claims = _claims({"predicate": "a.acc > b.acc"})
    index, page = _render(tmp_path, claims, _arms(a=[-0.01, -0.02, -0.01, -0.03, -0.9]))
    for row in (index, page):
        assert "tie; 0 of 5 seeds favour the claim: every seed is against it, yet the interval covers zero" in row

    index, page = _render(tmp_path, claims, _arms(a=[0.3, 0.2, -0.02, 0.25, 0.28]))
    for row in (index, page):
        assert "reproduced; 4 of 5 seeds favour the claim" in row


def test_a_deterministic_statement_reads_exact_with_one_value_no_interval_and_no_n(tmp_path):
    claims = _claims({"predicate": "a.acc < b.acc", "deterministic": True})
    index, page = _render(tmp_path, claims, _arms(a=[1.25] * 5, b=[2.0] * 5))
    for row in (index, page):
        measured = "`a.acc < b.acc`: 1.25 vs 2, margin 0.75 (exact) | reproduced (exact) |"
        assert measured in row
        assert "n=" not in row and "seeds favour" not in row and "q =" not in row and "[" not in measured
    # The same statement not declared exact is a sample of five seeds, with its n.
    index, _ = _render(tmp_path, _claims({"predicate": "a.acc < b.acc"}), _arms(a=[1.25] * 5, b=[2.0] * 5))
    assert "n=5" in index


def test_q_values_are_benjamini_hochberg_computed_by_hand():
    # sorted p 0.01, 0.03, 0.04, 0.2 (m = 4): p * m / rank = 0.04, 0.06, 0.0533, 0.2, then the running
    # minimum from the largest down: 0.04, 0.0533, 0.0533, 0.2.
    assert q_values([0.04, 0.01, 0.2, 0.03]) == pytest.approx([4 * 0.04 / 3, 0.04, 0.2, 4 * 0.04 / 3])
    assert q_values([]) == []


def test_a_called_verdict_that_does_not_survive_the_false_discovery_rate_reads_borderline(tmp_path):
    from scipy import stats

    margins = [[1.0, 1.1, 0.9, 1.05, 0.95], _margins(1.0, 0.43 * math.sqrt(2.5)),
               _margins(-1.0, 0.47 * math.sqrt(2.5)), _margins(0.2, 0.5 * math.sqrt(2.5))]
    values = {"a": {f"m{i}": m for i, m in enumerate(margins)}, "b": {f"m{i}": [0.0] * 5 for i in range(4)},
              "base": {"acc": [0.0] * 5}}
    claims = _claims(*({"predicate": f"a.m{i} > b.m{i}"} for i in range(4)))
    verdicts, _ = _from_result_file(tmp_path, claims, values)
    assert [v.verdict for v in verdicts] == ["reproduced", "reproduced", "not reproduced", "tie"]

    [adjusted] = with_q_values([verdicts], 0.05)

    p = [float(stats.ttest_1samp(m, 0.0).pvalue) for m in margins]
    assert 0.02 < p[1] < p[2] < 0.05  # called at 95% on their own
    expected = list(stats.false_discovery_control(p))
    assert [v.groups[0].q for v in adjusted] == pytest.approx(expected)
    assert expected[1] > 0.05 and expected[2] > 0.05 and expected[0] < 0.05
    assert [v.verdict for v in adjusted] == ["reproduced", "reproduced (borderline)", "not reproduced (borderline)",
                                             "tie"]
    [lenient] = with_q_values([verdicts], 0.10)
    assert [v.verdict for v in lenient] == [v.verdict for v in verdicts]
    [again] = with_q_values([adjusted], 0.10)  # adjusting twice is adjusting once
    assert [(v.verdict, v.groups[0].q) for v in again] == [(v.verdict, v.groups[0].q) for v in lenient]

    index, page = _render(tmp_path, claims, values)
    for text in (index, page):
        row = _row(text, "| s1 ")
        assert f"q = {docs.q_text(expected[1])}" in row
        assert "reproduced (borderline); 5 of 5 seeds favour the claim" in row
    assert "all 4 testable rows" in index


def test_only_rows_called_on_an_interval_are_adjusted():
    claims = _claims({"predicate": "a.acc > b.acc"}, {"predicate": "a.acc > b.acc", "precondition": "b.acc > 1"},
                     {"predicate": "a.acc > b.acc", "deterministic": True})
    variants = _variants()
    metrics = {slug: {"acc": {"a": 1.0, "b": 0.5, "base": 0.0}[raw["workload"]["variant"]] + 0.01 * raw["seed"]}
               for slug, raw in variants.items()}
    [adjusted] = with_q_values([evaluate(claims, variants, metrics, "tiny.yaml")], 0.05)
    assert [(v.verdict, v.groups[0].q is not None) for v in adjusted] == [
        ("reproduced", True), ("inconclusive", False), ("reproduced", False)]


def test_a_q_value_is_printed_on_the_side_of_the_rate_it_lies():
    assert docs.q_text(0.0502) == "0.0502" and docs.q_text(0.0498) == "0.0498" and docs.q_text(0.012) == "0.012"
    assert docs.q_text(0.05) == "0.05"


def test_seeds_needed_matches_the_power_tables():
    # Two-sided one-sample t-test at 5%, 80% power: d = 1 needs 10 pairs, d = 0.5 needs 34 (Cohen's
    # tables; the normal approximation (z_0.975 + z_0.8)^2 / d^2 + z_0.975^2 / 2 gives 9.8 and 33.3).
    assert seeds_needed(_margins(1.0, 1.0), 0.95) == 10
    assert seeds_needed(_margins(-1.0, 1.0), 0.95) == 10  # the direction does not change the power
    assert seeds_needed(_margins(0.5, 1.0), 0.95) == 34
    assert t_test_power(1.0, 10, 0.95) == pytest.approx(0.803, abs=1e-3)
    assert t_test_power(1.0, 9, 0.95) < 0.8
    assert seeds_needed(_margins(0.5, 1.0), 0.99) > 34  # a stricter level needs more seeds
    assert seeds_needed([0.1, -0.1, 0.2, -0.2, 0.0], 0.95) is None  # a zero mean: no effect to detect


@pytest.mark.parametrize(("mean", "words"), [
    (1.0, "likely real: needs about 10 seeds"),
    (-1.0, "likely real, against the claim: needs about 10 seeds"),
    (0.5, "null at this scale (would need about 34 seeds)"),
])
def test_every_tie_says_how_many_seeds_would_tell(tmp_path, mean, words):
    claims = _claims({"predicate": "a.acc > b.acc"})
    index, page = _render(tmp_path, claims, _arms(a=_margins(mean, 1.0)))
    for row in (index, page):
        assert "| tie; " in row and words in row


def test_the_headline_counts_statements_by_type(tmp_path):
    claims = _claims({"predicate": "a.acc > b.acc"}, {"predicate": "b.acc > base.acc", "type": "setting"},
                     {"predicate": "a.acc > base.acc", "type": "ablation"}, {"predicate": "b.acc > a.acc"})
    b = [0.60, 0.61, 0.62, 0.63, 0.64]
    index, page = _render(tmp_path, claims, _arms(a=[x + 0.1 for x in b], b=b, base=[0.5] * 5))
    assert "| statements | count | reproduced | not reproduced |" in index
    assert "| claim | 2 | 1 | 1 |" in index
    assert "| setting | 1 | 1 | 0 |" in index and "| ablation | 1 | 1 | 0 |" in index
    assert "| s1 (setting) |" in index and "| s1 (setting) |" in page


@pytest.mark.parametrize("text", ["a.acc / b.acc > 1", "a.acc > base.acc / b.acc"])
def test_a_predicate_that_divides_by_a_metric_zero_on_a_seed_is_one_line_naming_it(text):
    # Validate refuses a constant division by zero; a metric that is zero on one seed only shows
    # after the runs. It must be one line naming the field, not a ZeroDivisionError traceback.
    claims = _claims({"predicate": text})
    variants = _variants()
    metrics = {slug: {"acc": 0.0 if raw["workload"]["variant"] == "b" and raw["seed"] == 2 else 1.0 + raw["seed"]}
               for slug, raw in variants.items()}
    with pytest.raises(ScenarioError, match=r"tiny.yaml.*statements.0.predicate: .* divides by a metric that is "
                                            r"zero on the 3rd paired seed"):
        evaluate(claims, variants, metrics, "tiny.yaml")
