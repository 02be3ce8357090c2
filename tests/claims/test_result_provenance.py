"""Where a published number comes from: the code fingerprint of every result, the refusal to record
results from a dirty tree, and ``testbed reproduce --check`` (stale files, re-run samples, verdict
stability, "verified at <commit>")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from testbed.claims import check, results
from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import evaluate
from testbed.claims.papers import PAPERS
from testbed.claims.reproduce import code_folder, code_state
from testbed.errors import UserError
from testbed.provenance import fingerprint_at_head, fingerprint_changes, run_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.integration
def test_a_run_records_the_fingerprint_of_the_modules_it_imported(write_scenario, tmp_path):
    # In a process of its own, as `testbed run` and every sweep variant run (this test process has
    # imported more testbed modules than a run does).
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(write_scenario()), "--run-dir",
                           str(tmp_path / "run"), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    fingerprint = json.loads((tmp_path / "run" / "summary.json").read_text())["fingerprint"]
    modules = fingerprint["modules"]
    # The workload it ran and the runner that ran it, not a module it never imported.
    assert "testbed.workloads.classifier.workload" in modules and "testbed.workloads.runner" in modules
    assert "testbed.claims.check" not in modules
    # Each id is git's own object id of the file (independent reference: `git hash-object`).
    for name in ("testbed.workloads.runner", "testbed.execute"):
        path = ROOT / (name.replace(".", "/") + ".py")
        assert modules[name] == _git("hash-object", str(path)), name
    assert fingerprint["packages"]["numpy"] == np.__version__ and "torch" in fingerprint["packages"]
    # numpy's own BLAS, which every run loads (scipy's, which this process has loaded too, only where
    # a run imports scipy's linear algebra).
    numpy_blas = [f"{i['internal_api']} {i['version']} {i['architecture']}" for i in threadpool_info()
                  if i["user_api"] == "blas" and "numpy.libs" in i["filepath"]]
    assert numpy_blas and set(numpy_blas) <= set(fingerprint["blas"])


def test_a_fingerprint_is_compared_with_heads_module_by_module():
    # What this process ran, as HEAD's tree holds it: current by construction.
    recorded = fingerprint_at_head(run_fingerprint())
    assert recorded is not None
    assert recorded["modules"]["testbed.provenance"] == _git("rev-parse", "HEAD:testbed/provenance.py")
    assert fingerprint_changes(recorded, fingerprint_at_head(recorded)) == []

    edited = json.loads(json.dumps(recorded))
    edited["modules"]["testbed.provenance"] = "0" * 40
    edited["modules"]["testbed.gone"] = "1" * 40
    edited["packages"]["numpy"] = "0.0"
    edited["blas"] = ["mkl 2020.0 Haswell"]
    changes = fingerprint_changes(edited, fingerprint_at_head(edited))
    assert changes[:2] == ["testbed.provenance changed", "testbed.gone not in HEAD"]
    assert f"numpy 0.0 -> {np.__version__}" in changes
    assert any(change.startswith("BLAS mkl 2020.0 Haswell -> openblas") for change in changes)
    assert fingerprint_changes(None, recorded) == ["no fingerprint recorded"]
    # A library the checking process loaded and the run did not (scipy's OpenBLAS) is no change.
    more_loaded = {**recorded, "blas": [*recorded["blas"], "mkl 1 X"]}
    assert fingerprint_changes(recorded, more_loaded) == []


def test_result_files_keep_each_fingerprint_once_and_read_back_whole(tmp_path):
    fingerprint = {"modules": {"testbed.x": "a" * 40}, "packages": {"numpy": "2.0"}, "blas": []}
    records = {f"s{seed}": {"seed": seed, "config": "c", "final_metrics": {"m": 1.0}, "wall_s": 1.0,
                            "commit": "abc", "fingerprint": fingerprint} for seed in range(3)}
    path = tmp_path / "r.json"
    results.write_results(path, "scenarios/x.yaml", records)

    data = json.loads(path.read_text())
    assert len(data["fingerprints"]) == 1 and {r["fingerprint"] for r in data["variants"].values()} == \
        set(data["fingerprints"])
    assert results.read_results(path) == records


def test_the_provenance_line_names_the_one_clean_commit_or_says_there_is_none():
    clean = [{"commit": "abc"}, {"commit": "abc"}]
    assert results.provenance_line(clean) == "every row produced at commit abc"
    verified = [{"commit": "abc+dirty", "verified": "def"}, {"commit": "x", "verified": "def"}]
    assert results.provenance_line(verified) == "every row verified at commit def"
    assert results.provenance_line([{"commit": "def"}, *verified]) == "every row produced or verified at commit def"
    mixed = results.provenance_line([{"commit": "abc+dirty"}, {"commit": "def"}])
    assert mixed.startswith("not produced or verified at one clean commit (runs from abc+dirty, def)")
    assert "not produced" in results.provenance_line([{"commit": "abc+dirty"}])
    # Two scenarios of a paper, one re-run at a clean commit and one verified at another: each commit names its rows.
    assert results.provenance_line([*clean, *verified, {"commit": "abc"}]) == \
        "every row produced or verified at a clean commit: 3 produced at commit abc, 2 verified at commit def"
    assert "not produced" in results.provenance_line([*clean, {"commit": "def+dirty", "verified": "ghi+dirty"}])


def test_the_provenance_line_names_the_cpus_the_rows_ran_on_where_they_were_recorded():
    amd, intel = {"commit": "abc", "cpu": "AMD EPYC"}, {"commit": "abc", "cpu": "Intel Xeon"}
    unrecorded = {"commit": "abc"}  # kept before CPUs were recorded
    assert results.provenance_line([unrecorded]) == "every row produced at commit abc"
    assert results.provenance_line([amd, amd]) == "every row produced at commit abc; run on AMD EPYC"
    assert results.provenance_line([intel, amd, amd, unrecorded]) == ("every row produced at commit abc; run on "
                                                                       "AMD EPYC (2 rows), Intel Xeon (1 row) and "
                                                                       "a CPU not recorded (1 row)")
    assert results.cpu_model() and results.cpu_model() == results.cpu_model()


def _claims() -> ClaimsConfig:
    return ClaimsConfig.model_validate({
        "paper": "bisam", "arms": {"a": {"workload.variant": "a"}, "b": {"workload.variant": "b"}},
        "statements": [{"id": "a-beats-b", "quote": "q", "source": "Table 1", "predicate": "a.acc > b.acc"}]})


def _sweep(gap: float, seeds=range(5)) -> tuple[dict, dict]:
    variants = {f"{arm},{seed}": {"seed": seed, "workload": {"variant": arm}} for arm in "ab" for seed in seeds}
    noise = [0.01, -0.02, 0.015, 0.0, -0.005, 0.02, -0.01]
    records = {slug: {"seed": raw["seed"], "commit": "abc", "wall_s": 30.0,
                      "final_metrics": {"acc": 0.8 + (gap if raw["workload"]["variant"] == "a" else 0.0)
                                        + noise[raw["seed"]]}}
               for slug, raw in variants.items()}
    return variants, records


def test_a_sample_takes_whole_seeds_of_every_arm_and_is_the_same_every_time():
    variants, records = _sweep(0.05)
    arms = _claims().arms

    sample = check.draw_sample(records, variants, arms, 1, "x.yaml")  # fewer than the minimum asked
    seeds = {records[slug]["seed"] for slug in sample}
    assert len(seeds) == check.MIN_SEEDS and sample == sorted(f"{arm},{seed}" for arm in "ab" for seed in seeds)
    assert check.draw_sample(records, variants, arms, 1, "x.yaml") == sample
    assert len(check.draw_sample(records, variants, arms, 7, "x.yaml")) == 6  # whole seeds within 7
    assert check.duration(records, sample) == "2.0 min"


def test_a_rerun_within_the_tolerance_holds_and_one_that_moves_a_verdict_or_a_row_does_not():
    claims, (variants, records) = _claims(), _sweep(0.05)
    sample = check.draw_sample(records, variants, claims.arms, 4, "x.yaml")

    def rerun(shift: float) -> dict:
        return {slug: {**records[slug], "final_metrics": {"acc": records[slug]["final_metrics"]["acc"]
                                                          + (shift if slug.startswith("a") else 0.0)}}
                for slug in sample}

    problems, largest, where = check.compare(claims, variants, records, rerun(0.004), "x.yaml")
    assert problems == [] and largest == pytest.approx(0.004 / 0.854, rel=0.2) and where.startswith("acc of a,")

    moved, _, _ = check.compare(claims, variants, records, rerun(0.02), "x.yaml")  # 2% of the row's scale
    assert len(moved) == 1 and moved[0].startswith("a-beats-b: predicate ") and "more than 1%" in moved[0]

    flipped, _, _ = check.compare(claims, variants, records, rerun(-0.2), "x.yaml")
    assert "a-beats-b: reproduced -> tie" in flipped  # two of five seeds turned against it
    assert evaluate(claims, variants, {s: r["final_metrics"] for s, r in records.items()}, "x")[0].verdict == \
        "reproduced"


def test_a_row_that_moves_says_how_far_in_its_spread_over_seeds():
    # Each arm with its own noise over seeds, so that every side of the row has a spread.
    claims = _claims()
    noise = {"a": [0.01, -0.02, 0.015, 0.0, -0.005], "b": [0.0, 0.01, -0.01, 0.02, 0.005]}
    variants = {f"{arm},{seed}": {"seed": seed, "workload": {"variant": arm}} for arm in "ab" for seed in range(5)}
    records = {slug: {"seed": raw["seed"], "commit": "abc", "final_metrics": {
        "acc": {"a": 0.85, "b": 0.8}[slug[0]] + noise[slug[0]][raw["seed"]]}} for slug, raw in variants.items()}
    sample = check.draw_sample(records, variants, claims.arms, 4, "x.yaml")
    rerun = {slug: {**records[slug], "final_metrics": {
        "acc": records[slug]["final_metrics"]["acc"] + {"a": 0.03, "b": 0.01}[slug[0]]}} for slug in sample}

    (moved,), _, _ = check.compare(claims, variants, records, rerun, "x.yaml")
    # The left side moved most: 0.03 against the standard deviation of arm a's noise, 0.0137.
    assert moved.startswith("a-beats-b: predicate left ") and moved.endswith(
        "; 2.2 of its standard deviation over seeds)")


def test_a_verified_file_names_the_commit_and_moves_to_the_fingerprint_it_was_checked_against(tmp_path):
    claims, (variants, records) = _claims(), _sweep(0.05)
    # Named as a sweep names its variants, after the slug (the seed with it): the seeds the sample
    # did not re-run still share their setting's fingerprint.
    variants = {slug: {**variant, "name": f"x-{slug}"} for slug, variant in variants.items()}
    sample = check.draw_sample(records, variants, claims.arms, 4, "x.yaml")
    assert len(sample) < len(records)
    new = {"modules": {"testbed.x": "b" * 40}, "packages": {}, "blas": []}
    rerun = {slug: {**records[slug], "fingerprint": new} for slug in sample}

    marked = check.mark_verified(records, rerun, variants, "def")
    assert all(r["verified"] == "def" and r["fingerprint"] == new for r in marked.values())
    assert {s: r["final_metrics"] for s, r in marked.items()} == {s: r["final_metrics"] for s, r in records.items()}
    assert results.provenance_line(marked.values()) == "every row verified at commit def"


def test_reproduce_refuses_to_run_on_a_dirty_tree_without_allow_dirty(cli, tmp_path, monkeypatch):
    import testbed.claims.reproduce as reproduce

    started = []
    monkeypatch.setattr(reproduce, "source_commit", lambda: "abc123+dirty", raising=False)
    monkeypatch.setattr(reproduce, "_run", lambda *args, **kwargs: started.append(args))

    code, _, err = cli("reproduce", "gridcoarsen", "--runs-dir", tmp_path / "runs")

    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "uncommitted changes (commit abc123+dirty)" in err and "--allow-dirty" in err
    assert started == [] and not (tmp_path / "runs").exists()


def test_check_refuses_to_verify_on_a_dirty_tree_without_allow_dirty(cli, tmp_path, monkeypatch):
    import testbed.claims.reproduce as reproduce

    monkeypatch.setattr(reproduce, "source_commit", lambda: "abc123+dirty", raising=False)
    code, _, err = cli("reproduce", "--check", "gridcoarsen", "--sample", "6", "--runs-dir", tmp_path / "runs")

    assert code == 2 and err.count("\n") == 1 and "reproduce --check --sample: " in err and "--allow-dirty" in err
    assert not (tmp_path / "runs").exists()


def test_collect_leaves_out_a_run_made_on_a_dirty_tree_unless_allowed(tmp_path, monkeypatch):
    import testbed.claims.reproduce as reproduce

    item = reproduce.load(ROOT, "workloads/gridcoarsen.yaml", "test")
    slug = sorted(item.variants)[0]
    dirty = {"seed": 0, "config": results.variant_hash(item.variants[slug]), "final_metrics": {"m": 1.0},
             "wall_s": 1.0, "commit": "abc+dirty", "fingerprint": None}
    monkeypatch.setattr(results, "record_of", lambda folder, raw: dirty if folder.name == slug else None)

    assert reproduce.collect(item, ROOT, "test", tmp_path, allow_dirty=False) == [slug]
    assert not (tmp_path / "results" / "workloads" / "gridcoarsen.json").exists()
    assert reproduce.collect(item, ROOT, "test", tmp_path, allow_dirty=True) == []
    assert results.read_results(tmp_path / "results" / "workloads" / "gridcoarsen.json")[slug]["commit"] == "abc+dirty"


def test_reproduce_merges_results_only_after_every_sweep_ran(tmp_path, monkeypatch):
    # A result file written between two sweeps leaves the checkout with uncommitted changes while the
    # later sweeps run, and their runs record '<commit>+dirty' (and are then not recorded).
    import testbed.claims.reproduce as reproduce

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(reproduce, "_run", lambda item, *args: calls.append(("run", item.path)))
    monkeypatch.setattr(reproduce, "collect", lambda item, *args: calls.append(("collect", item.path)) or [])
    reproduce.reproduce(ROOT, ["dddm", "stc"], "test", tmp_path, run=True, quiet=True)

    steps = [step for step, _ in calls]
    assert steps == ["run"] * 4 + ["collect"] * 4
    assert [path for _, path in calls[:4]] == [path for _, path in calls[4:]]


@pytest.mark.parametrize("args, words", [
    (["--sample", "4"], "--sample: 4: only with --check"),
    (["--check", "--sample", "0"], "--sample: 0: at least 1"),
    (["--check", "--docs-only"], "--check: runs no sweep and writes no docs"),
])
def test_check_options_are_refused_in_one_line(cli, tmp_path, args, words):
    code, _, err = cli("reproduce", "gridcoarsen", *args, "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and words in err
    assert not (tmp_path / "runs").exists()


def test_check_lists_each_result_file_current_or_stale_and_runs_nothing(cli, tmp_path):
    code, out, err = cli("reproduce", "--check", "gridcoarsen", "--runs-dir", tmp_path / "runs")

    assert code == 0, err
    (line,) = out.strip().splitlines()
    # Whether the committed file is current depends on what changed since it ran; either way one line
    # says so, and a stale one says why and what re-running a sample and the whole file cost.
    shown = "docs/reproduction/results/workloads/gridcoarsen.json"
    stale = re.fullmatch(rf"stale: {shown}: \d+ of 15 variants \((.+)\); a sample of 6 variants re-runs in "
                         r"about [\d.]+ min, the whole file in [\d.]+ min", line)
    assert stale or re.fullmatch(rf"current: {shown}: 15 variants, .+", line), line
    assert not (tmp_path / "runs").exists()  # without --sample nothing runs


def test_check_takes_one_scenario_of_a_paper_as_well_as_the_paper():
    from testbed.claims.reproduce import chosen_scenarios

    one = "pretrain/outeffhop-opt.yaml"
    assert chosen_scenarios([one]) == {"outeffhop": [one]}
    assert chosen_scenarios(["outeffhop", one])["outeffhop"] == list(PAPERS["outeffhop"].scenarios)
    assert chosen_scenarios(["dddm", one]) == {"dddm": list(PAPERS["dddm"].scenarios), "outeffhop": [one]}
    assert chosen_scenarios([]) == {paper: list(entry.scenarios) for paper, entry in PAPERS.items()}
    with pytest.raises(UserError, match=r"no paper has the scenario 'pretrain/outeffhop-op.yaml' \(did you mean "
                                        r"'pretrain/outeffhop-opt.yaml'\?\)"):
        chosen_scenarios(["pretrain/outeffhop-op.yaml"])
    with pytest.raises(UserError, match="unknown paper 'outefhop'"):
        chosen_scenarios(["outefhop"])


def _fingerprintless_gridcoarsen(tmp_path: Path) -> tuple[Any, dict[str, dict], Path]:
    """The test size's gridcoarsen variants, their published numbers written to a test-size result file
    under ``tmp_path`` without fingerprints (as every file written before fingerprints existed)."""
    import testbed.claims.reproduce as reproduce

    item = reproduce.load(ROOT, "workloads/gridcoarsen.yaml", "test")
    published = results.read_results(ROOT / "docs" / "reproduction" / "results" / "workloads" / "gridcoarsen.json")
    records = {slug: {**published[slug], "config": results.variant_hash(raw), "fingerprint": None}
               for slug, raw in item.variants.items()}
    result_file = tmp_path / "results" / "workloads" / "gridcoarsen.json"
    results.write_results(result_file, "scenarios/workloads/gridcoarsen.yaml", records)
    return item, records, result_file


def test_a_result_file_without_fingerprints_is_stale_in_every_record(tmp_path):
    import testbed.claims.reproduce as reproduce

    _, _, result_file = _fingerprintless_gridcoarsen(tmp_path)

    (line,) = reproduce.check_results(ROOT, ["gridcoarsen"], "test", tmp_path, None, quiet=True)

    assert line.startswith(f"stale: {result_file}: 6 of 6 variants (no fingerprint recorded: 6); a sample of 6 "
                           "variants re-runs in about "), line


def test_check_verifies_a_stale_file_and_then_lists_it_current(tmp_path, monkeypatch):
    # The flow of `testbed reproduce --check gridcoarsen --size test --sample 4`, with the re-runs
    # stood in for by the published numbers under HEAD's fingerprint (the real re-runs: 6 runs, ~1 min).
    import testbed.claims.reproduce as reproduce
    import testbed.sweep

    item, records, result_file = _fingerprintless_gridcoarsen(tmp_path)
    at_head = fingerprint_at_head(run_fingerprint())
    ran: list[set[str]] = []
    monkeypatch.setattr(testbed.sweep, "run_sweep", lambda *args, only, **kwargs: ran.append(only))
    monkeypatch.setattr(results, "record_of", lambda folder, raw: {**records[folder.name], "fingerprint": at_head})
    monkeypatch.setattr(reproduce, "source_commit", lambda: "abc123")

    lines = reproduce.check_results(ROOT, ["gridcoarsen"], "test", tmp_path, 4, quiet=True)

    assert lines[0].startswith(f"stale: {result_file}: 6 of 6 variants (no fingerprint recorded: 6)")
    assert ran == [set(item.variants)]  # both test seeds of every arm: the minimum, over the 4 asked
    assert lines[1].endswith("every verdict holds, rows within 1%: verified at abc123"), lines
    kept = results.read_results(result_file)
    assert {r["verified"] for r in kept.values()} == {"abc123"} and all(r["fingerprint"] == at_head
                                                                         for r in kept.values())
    again = reproduce.check_results(ROOT, ["gridcoarsen"], "test", tmp_path, None, quiet=True)
    assert again == [f"current: {result_file}: 6 variants, every row verified at commit abc123"]


def test_a_check_on_other_code_samples_in_a_folder_of_its_own(tmp_path):
    # An earlier check's folder holds variants run on other code (stale to this one) or another sample
    # (a different sweep, which a sweep folder refuses): a check on other code must not meet them,
    # and one on the same code resumes its own, also after a commit of results or docs (a sample of
    # hours spans sessions, and each session commits).
    repo = tmp_path / "repo"
    (repo / "testbed").mkdir(parents=True)
    (repo / "docs").mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]

    def commit(path: str, text: str) -> str | None:
        (repo / path).write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", path], check=True)
        return code_state("abc", repo)

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = commit("testbed/a.py", "x = 1\n")
    assert first is not None and first.startswith("testbed-")
    assert commit("docs/page.md", "results\n") == first
    assert commit("testbed/a.py", "x = 2\n") != first
    assert code_state("abc+dirty", repo) == "abc+dirty"  # uncommitted code has no tree

    folder = code_folder(tmp_path, "full", "workloads/dddm.yaml", first)
    assert folder == code_folder(tmp_path, "full", "workloads/dddm.yaml", first)
    assert folder != code_folder(tmp_path, "full", "workloads/dddm.yaml", "testbed-bbbbbbbbbbbb")
    # --rerun runs in the same folder, so that a sample that did not hold counts towards the whole re-run.
    assert folder.name == "dddm" and folder.is_relative_to(tmp_path / "rerun" / "full")
