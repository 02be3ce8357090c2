"""Claims through the CLI: bad claims are one line naming the file and field (exit 2); a sweep ends
with its verdicts in claims.json, on stdout and in its report."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY_SCENARIO

STATEMENT = {"id": "fast-wins", "quote": "a larger step learns faster", "source": "Table 1",
             "predicate": "fast.test_accuracy > slow.test_accuracy"}
SWEEP = {
    **TINY_SCENARIO,
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
    "training": {"steps": 6, "eval_every": 3, "checkpoint_every": 3},
    "sweep": {"variants": [{"workload.lr": 0.3}, {"workload.lr": 0.001}], "grid": {"seed": [0, 1]}, "parallel": 2},
    "claims": {"paper": "bisam", "seeds": 2, "fewer_seeds_because": "a test",
               "arms": {"fast": {"workload.lr": 0.3}, "slow": {"workload.lr": 0.001}}, "statements": [STATEMENT]},
}


def _with_claims(**changes) -> dict:
    return {**SWEEP, "claims": {**SWEEP["claims"], **changes}}


CASES = [
    ("unknown-arm", _with_claims(statements=[{**STATEMENT, "predicate": "fast.test_accuracy > slw.test_accuracy"}]),
     "claims.statements.0.predicate: unknown arm 'slw' (did you mean 'slow'?)"),
    ("predicate-does-not-parse", _with_claims(statements=[{**STATEMENT, "predicate": "fast.test_accuracy >"}]),
     "claims.statements.0.predicate: 'fast.test_accuracy >' does not parse"),
    ("predicate-calls-code", _with_claims(statements=[{**STATEMENT, "predicate": "__import__('os').getpid() > 1"}]),
     "claims.statements.0.predicate: '__import__('os').getpid() > 1': '__import__('os').getpid()' is not allowed"),
    ("for-each-unknown-key", _with_claims(statements=[{**STATEMENT, "for_each": "workload.nope"}]),
     "claims.statements.0.for_each: no variant the statement's arms select has 'workload.nope'"),
    ("unknown-paper", _with_claims(paper="bisma"), "claims.paper: unknown paper 'bisma'"),
    ("arm-selects-nothing", _with_claims(arms={"fast": {"workload.lr": 0.5}, "slow": {"workload.lr": 0.001}}),
     "claims.arms.fast: selects no variant of the sweep"),
    ("too-few-seeds", _with_claims(seeds=3), "claims.seeds: the claims need 3 seeds; arm 'fast' has 2"),
    ("unknown-claims-key", _with_claims(statments=[]), "claims.statments: unknown key (did you mean 'statements'?)"),
    ("claims-without-sweep", {k: v for k, v in SWEEP.items() if k != "sweep"}, "claims: a claims block needs a sweep"),
    ("arm-selects-by-seed", _with_claims(arms={"fast": {"seed": 0}, "slow": {"workload.lr": 0.001}}),
     "claims.arms: fast: seed: arms are paired by seed"),
]


@pytest.mark.parametrize(("changes", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_claims_are_one_line_naming_file_and_field(cli, write_scenario, tmp_path, changes, words, command):
    path = write_scenario(changes)
    args = (command, path) + (("--run-dir", tmp_path / "out", "--quiet") if command == "run" else ())
    code, _, err = cli(*args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: ") and words in err
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_a_sweep_ends_with_its_verdicts(cli, write_scenario, tmp_path):
    code, out, err = cli("run", write_scenario(SWEEP), "--run-dir", tmp_path / "sweep", "--quiet")

    assert code == 0, err
    [claim] = json.loads((tmp_path / "sweep" / "claims.json").read_text())
    assert claim["id"] == "fast-wins" and claim["groups"][0]["seeds"] == [0, 1]
    predicate = claim["groups"][0]["predicate"]
    finals = {slug: json.loads((tmp_path / "sweep" / "variants" / slug / "summary.json").read_text())["final_metrics"]
              for slug in json.loads((tmp_path / "sweep" / "summary.json").read_text())["variants"]}
    fast = [m["test_accuracy"] for slug, m in finals.items() if "lr=0.3" in slug]
    assert predicate["left"] == pytest.approx(sum(fast) / 2)
    assert f"claim fast-wins: {claim['verdict']}" in out
    assert "Claims (paired by seed)" in (tmp_path / "sweep" / "report" / "index.html").read_text()

    # Rewording a claim changes no variant: the same folder takes the sweep again and reruns nothing.
    reworded = _with_claims(statements=[{**STATEMENT, "quote": "reworded"}])
    code, out, err = cli("run", write_scenario(reworded, name="reworded.yaml"), "--run-dir", tmp_path / "sweep",
                         "--quiet")
    assert code == 0, err
    assert all(r["skipped"] for r in json.loads((tmp_path / "sweep" / "summary.json").read_text())["variants"].values())


def test_no_sweep_runs_the_base_scenario_without_its_claims(cli, write_scenario, tmp_path):
    code, _, err = cli("run", write_scenario(SWEEP), "--no-sweep", "--run-dir", tmp_path / "one", "--quiet")
    assert code == 0, err


def test_reproduce_refuses_an_unknown_paper_in_one_line(cli, tmp_path):
    code, _, err = cli("reproduce", "bisma", "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and "reproduce: unknown paper 'bisma' (did you mean 'bisam'?)" in err
    assert not (tmp_path / "runs").exists()
