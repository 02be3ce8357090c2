"""The claims schema beyond papers: a researcher's own claims (no paper, quote or source), statement
types, per-statement ``deterministic`` and ``secondary`` values, and their one-line errors."""

from __future__ import annotations

import html
import json
import statistics

import pytest
import yaml
from scipy import stats

from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import check_claims, evaluate
from testbed.errors import ScenarioError
from tests.conftest import TINY_SCENARIO
from tests.core.test_bad_input_corpus import Case, assert_refused_cleanly

# "My rule beats the other by at least 2 points over 3 seeds", as a researcher writes it in their sweep.
OWN = {"id": "big-step-wins", "predicate": "fast.test_accuracy - slow.test_accuracy > 0.02",
       "secondary": ["fast.test_loss - slow.test_loss", "fast.test_accuracy"]}
SWEEP = {
    **TINY_SCENARIO,
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
    "training": {"steps": 6, "eval_every": 3, "checkpoint_every": 3},
    "sweep": {"variants": [{"workload.lr": 0.3}, {"workload.lr": 0.001}], "grid": {"seed": [0, 1, 2]},
              "parallel": 2},
    "claims": {"seeds": 3, "fewer_seeds_because": "a test",
               "arms": {"fast": {"workload.lr": 0.3}, "slow": {"workload.lr": 0.001}}, "statements": [OWN]},
}


@pytest.mark.integration
def test_a_user_sweep_without_a_paper_gets_its_paired_verdict_in_the_report(cli, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    code, out, err = cli("run", path, "--run-dir", tmp_path / "sweep", "--quiet")
    assert code == 0, err

    [claim] = json.loads((tmp_path / "sweep" / "claims.json").read_text())
    assert (claim["id"], claim["type"], claim["quote"], claim["source"]) == ("big-step-wins", "claim", None, None)
    [group] = claim["groups"]
    assert group["seeds"] == [0, 1, 2]
    # The verdict is the paired t interval of the per-seed margins, recomputed here from the variants' own files.
    sweep = tmp_path / "sweep"
    finals = {slug: json.loads((sweep / "variants" / slug / "summary.json").read_text())["final_metrics"]
              for slug in json.loads((sweep / "summary.json").read_text())["variants"]}
    by_seed = {arm: [finals[s] for s in sorted(finals, key=lambda s: s.split(",")[-1]) if f"lr={lr}" in s]
               for arm, lr in (("fast", 0.3), ("slow", 0.001))}
    margins = [f["test_accuracy"] - s["test_accuracy"] - 0.02 for f, s in zip(by_seed["fast"], by_seed["slow"],
                                                                             strict=True)]
    half = stats.t.ppf(0.975, 2) * statistics.stdev(margins) / 3 ** 0.5
    interval = group["predicate"]["interval"]
    assert interval["n"] == 3 and interval["mean"] == pytest.approx(statistics.mean(margins))
    assert (interval["low"], interval["high"]) == pytest.approx((statistics.mean(margins) - half,
                                                                 statistics.mean(margins) + half))
    expected = "reproduced" if interval["low"] > 0 else "not reproduced" if interval["high"] < 0 else "tie"
    assert claim["verdict"].startswith(expected)
    loss, accuracy = group["secondary"]
    assert loss["interval"]["mean"] == pytest.approx(statistics.mean(
        f["test_loss"] - s["test_loss"] for f, s in zip(by_seed["fast"], by_seed["slow"], strict=True)))
    assert accuracy["interval"]["mean"] == pytest.approx(statistics.mean(f["test_accuracy"] for f in by_seed["fast"]))

    # The sweep's report shows the row: its id, type, seed count, verdict and the secondary values.
    page = html.unescape((sweep / "report" / "index.html").read_text())
    row = page.split("Claims (paired by seed)", 1)[1].split("</tr>", 2)[1]
    assert "big-step-wins" in row and ">claim<" in row and ">3<" in row and f">{claim['verdict']}<" in row
    assert f"fast.test_accuracy: {accuracy['interval']['mean']:.4g}" in row
    assert f"claim big-step-wins: {claim['verdict']}" in out


def _claims(*statements: dict, **extra) -> ClaimsConfig:
    return ClaimsConfig.model_validate({"arms": {"a": {"workload.variant": "a"}, "b": {"workload.variant": "b"}},
                                        "statements": list(statements), **extra})


def _variants(seeds: range = range(5)) -> dict[str, dict]:
    return {f"{arm},{seed}": {"seed": seed, "workload": {"variant": arm}} for arm in "ab" for seed in seeds}


def test_a_statement_s_deterministic_overrides_the_block_s_either_way():
    # An accountant's output is the same on every seed; a sampled metric is not.
    metrics = {f"{arm},{seed}": {"eps": 2.0 if arm == "a" else 1.0, "acc": 0.5 + (0.1 if arm == "a" else 0) * seed}
               for arm in "ab" for seed in range(5)}
    exact = {"id": "exact", "predicate": "a.eps > b.eps", "deterministic": True}
    sampled = {"id": "sampled", "predicate": "a.acc > b.acc"}
    mixed = evaluate(_claims(exact, sampled), _variants(), metrics, "f.yaml")
    assert [v.groups[0].predicate.interval.method for v in mixed] == ["exact", "t"]
    assert mixed[0].groups[0].predicate.interval.mean == 1.0

    block = evaluate(_claims({**sampled, "deterministic": False}, {**exact, "deterministic": None}, deterministic=True),
                     _variants(), metrics, "f.yaml")
    assert [v.groups[0].predicate.interval.method for v in block] == ["t", "exact"]


def test_secondary_values_are_computed_over_the_predicate_s_paired_seeds():
    metrics = {f"{arm},{seed}": {"acc": [0.6, 0.7, 0.9][seed] if arm == "a" else 0.5, "lost": 0.1 * seed}
               for arm in "ab" for seed in range(3)}
    statement = {"id": "s", "predicate": "a.acc > b.acc", "secondary": ["a.acc - b.acc", "max(a.lost, 0.15)"]}
    claims = _claims(statement, seeds=3, fewer_seeds_because="a test")
    [verdict] = evaluate(claims, _variants(range(3)), metrics, "f.yaml")
    difference, floor = verdict.groups[0].secondary
    assert difference.text == "a.acc - b.acc" and difference.interval.n == 3
    assert difference.interval.mean == pytest.approx((0.1 + 0.2 + 0.4) / 3)
    half = stats.t.ppf(0.975, 2) * statistics.stdev([0.1, 0.2, 0.4]) / 3 ** 0.5
    assert difference.interval.low == pytest.approx(0.7 / 3 - half)
    assert floor.interval.mean == pytest.approx((0.15 + 0.15 + 0.2) / 3)


def test_secondary_names_known_arms_and_reported_metrics():
    claims = _claims({"id": "s", "predicate": "a.acc > b.acc", "secondary": ["a.acc - c.acc"]})
    with pytest.raises(ScenarioError, match=r"f.yaml: claims.statements.0.secondary.0: unknown arm 'c'"):
        check_claims(claims, _variants(), "f.yaml")
    claims = _claims({"id": "s", "predicate": "a.acc > b.acc", "secondary": ["a.ac"]})
    metrics = {slug: {"acc": 0.5} for slug in _variants()}
    with pytest.raises(ScenarioError, match=r"claims.statements.0.secondary.0: arm 'a' reports no metric 'ac' "
                                            r"\(did you mean 'acc'\?\)"):
        evaluate(claims, _variants(), metrics, "f.yaml")


def test_reproduce_refuses_a_listed_scenario_whose_claims_name_no_paper(tmp_path):
    from testbed.claims.reproduce import load

    (tmp_path / "docs").mkdir()
    scenario = tmp_path / "scenarios" / "mine.yaml"
    scenario.parent.mkdir()
    scenario.write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    with pytest.raises(ScenarioError, match=r"^scenarios/mine.yaml: claims.paper: required .*docs/reproduction.md"):
        load(tmp_path, "mine.yaml", "full")


def _with(statement: dict | None = None, **claims) -> dict:
    return {**SWEEP, "claims": {**SWEEP["claims"], **claims,
                                "statements": [{**OWN, **(statement or {})}]}}


W = "workload"
# Cases for the bad-input corpus (tests/core/test_bad_input_corpus.py's helpers), with the words the line must hold.
CASES = [
    Case("claims-paper-claim-without-quote", W, _with(paper="bisam", statement={"source": "Table 1"}),
         ("claims: statements.0.quote: required where the block names a paper ('bisam')",)),
    Case("claims-paper-claim-without-source", W, _with(paper="bisam", statement={"quote": "it wins"}),
         ("claims: statements.0.source: required where the block names a paper",)),
    Case("claims-type-unknown", W, _with({"type": "hunch"}), ("claims.statements.0.type", "'setting'")),
    Case("claims-secondary-is-a-comparison", W, _with({"secondary": ["fast.test_loss < 1"]}),
         ("claims.statements.0.secondary.0", "not a comparison")),
    Case("claims-secondary-runs-code", W, _with({"secondary": ["__import__('os').getpid()"]}),
         ("claims.statements.0.secondary.0", "is not allowed")),
    Case("claims-secondary-unknown-arm", W, _with({"secondary": ["fast.test_loss - slwo.test_loss"]}),
         ("claims.statements.0.secondary.0: unknown arm 'slwo' (did you mean 'slow'?)",)),
    Case("claims-deterministic-not-a-bool", W, _with({"deterministic": "sometimes"}),
         ("claims.statements.0.deterministic",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_own_claims_are_one_line_exit_2_and_leave_no_run_folder(cli, tmp_path, monkeypatch, case: Case):
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)
