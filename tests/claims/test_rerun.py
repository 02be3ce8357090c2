"""``testbed reproduce --rerun``: a whole re-run that keeps the published file until it is complete,
and its runs so far in a file of its own that any checkout of the same code resumes from.

The sweeps are stood in for (the real ones: `tests/claims/test_reproduce_test_size.py`): a variant
"completes" when the stand-in of `results.record_of` has a record for it."""

from __future__ import annotations

from pathlib import Path

import pytest

import testbed.claims.reproduce as reproduce
import testbed.sweep
from testbed.claims import rerun, results
from testbed.provenance import fingerprint_at_head, run_fingerprint, source_commit

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "workloads/gridcoarsen.yaml"


@pytest.fixture
def stood_in(tmp_path, monkeypatch):
    """The test size's gridcoarsen with a stale published file (no fingerprints) under ``tmp_path``,
    sweeps that run nothing, and the variants in ``completed`` completed, on HEAD's code."""
    item = reproduce.load(ROOT, SCENARIO, "test")
    published = results.read_results(ROOT / "docs" / "reproduction" / "results" / "workloads" / "gridcoarsen.json")
    old = {slug: {**{k: v for k, v in published[slug].items() if k != "verified"},
                  "config": results.variant_hash(raw), "fingerprint": None} for slug, raw in item.variants.items()}
    results.write_results(reproduce.result_path(ROOT, SCENARIO, "test", tmp_path), f"scenarios/{SCENARIO}", old)
    at_head = fingerprint_at_head(run_fingerprint())
    completed: set[str] = set()
    ran: list[set[str]] = []
    monkeypatch.setattr(testbed.sweep, "run_sweep", lambda *args, only, **kwargs: ran.append(set(only)))
    monkeypatch.setattr(results, "record_of", lambda folder, raw: {
        **old[folder.name], "commit": "abc123", "fingerprint": at_head} if folder.name in completed else None)
    return item, old, completed, ran


def test_a_rerun_keeps_the_published_file_until_every_variant_ran_again(stood_in, tmp_path, monkeypatch):
    item, old, completed, ran = stood_in
    folders: list[Path] = []  # the re-run's sweep folder is the check's: a failed sample's runs count here
    monkeypatch.setattr(testbed.sweep, "run_sweep",
                        lambda *args, only, **kwargs: (ran.append(set(only)), folders.append(args[3])))
    published = reproduce.result_path(ROOT, SCENARIO, "test", tmp_path)
    pending = reproduce.rerun_path(ROOT, SCENARIO, "test", tmp_path)
    before = published.read_bytes()
    first = sorted(item.variants)[:2]
    completed.update(first)

    (line,) = rerun.rerun_results(ROOT, [SCENARIO], "test", tmp_path, run=True, quiet=True)

    assert ran == [set(item.variants)]
    assert folders == [reproduce.code_folder(tmp_path, "test", SCENARIO, reproduce.code_state(source_commit()))]
    assert line.startswith(f"re-run of {published}: 2 of 6 variants so far, kept in {pending} (commit it"), line
    assert published.read_bytes() == before and set(results.read_results(pending)) == set(first)
    (listed,) = reproduce.check_results(ROOT, [SCENARIO], "test", tmp_path, None, quiet=True)
    assert listed.endswith(f"a whole re-run is under way: 2 of 6 variants in {pending}"), listed

    # The next session (any machine with the committed file) runs only what the file lacks.
    completed.update(item.variants)
    lines = rerun.rerun_results(ROOT, [SCENARIO], "test", tmp_path, run=True, quiet=True)

    assert ran[1] == set(item.variants) - set(first)
    assert lines[0] == f"re-ran {published} whole: 6 variants, every row produced at commit abc123"
    assert lines[1].startswith("gridcoarsen: ")  # the paper's docs, written from the new file
    assert not pending.exists() and (tmp_path / "docs" / "reproduction.md").is_file()
    assert {s: r["final_metrics"] for s, r in results.read_results(published).items()} == \
        {s: r["final_metrics"] for s, r in old.items()}
    (listed,) = reproduce.check_results(ROOT, [SCENARIO], "test", tmp_path, None, quiet=True)
    assert listed == f"current: {published}: 6 variants, every row produced at commit abc123"


def test_an_interrupted_rerun_keeps_what_completed(stood_in, tmp_path, monkeypatch):
    item, _, completed, _ = stood_in

    def interrupted(*args, only, **kwargs):
        completed.update(sorted(only)[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(testbed.sweep, "run_sweep", interrupted)
    with pytest.raises(rerun.RerunInterrupted) as caught:
        rerun.rerun_results(ROOT, [SCENARIO], "test", tmp_path, run=True, quiet=True)

    kept = results.read_results(reproduce.rerun_path(ROOT, SCENARIO, "test", tmp_path))
    assert set(kept) == set(sorted(item.variants)[:3])
    (line,) = caught.value.lines
    assert "3 of 6 variants so far" in line and caught.value.command == f"testbed reproduce --rerun {SCENARIO}"


def test_the_cli_names_the_command_that_continues_an_interrupted_rerun(cli, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise rerun.RerunInterrupted(["re-run of X: 3 of 6 variants so far"], "testbed reproduce --rerun gridcoarsen")

    monkeypatch.setattr(rerun, "rerun_results", interrupted)
    code, out, err = cli("reproduce", "--rerun", "gridcoarsen", "--runs-dir", tmp_path / "runs")

    assert code == 130 and out == "re-run of X: 3 of 6 variants so far\n"
    assert err == "interrupted: 'testbed reproduce --rerun gridcoarsen' continues from what was kept\n"


def test_a_rerun_runs_again_what_it_kept_on_other_code(stood_in, tmp_path):
    item, old, _, ran = stood_in
    slug = sorted(item.variants)[0]
    other = {"modules": {"testbed.gone": "b" * 40}, "packages": {}, "blas": []}
    pending = reproduce.rerun_path(ROOT, SCENARIO, "test", tmp_path)
    results.write_results(pending, f"scenarios/{SCENARIO}", {slug: {**old[slug], "fingerprint": other}})

    rerun.rerun_results(ROOT, [SCENARIO], "test", tmp_path, run=True, quiet=True)

    assert ran == [set(item.variants)] and not results.read_results(pending)


def test_keeping_only_runs_nothing(stood_in, tmp_path):
    item, _, completed, ran = stood_in
    completed.add(sorted(item.variants)[0])

    (line,) = rerun.rerun_results(ROOT, [SCENARIO], "test", tmp_path, run=False, quiet=True)

    assert ran == [] and "1 of 6 variants so far" in line


def test_rerun_is_refused_beside_check_without_names_and_on_a_dirty_tree(cli, tmp_path, monkeypatch):
    code, _, err = cli("reproduce", "--rerun", "--check", "gridcoarsen", "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and "--rerun: re-runs whole what --check would sample" in err

    code, _, err = cli("reproduce", "--rerun", "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and "--rerun: name the papers or scenarios" in err

    monkeypatch.setattr(reproduce, "source_commit", lambda: "abc123+dirty", raising=False)
    code, _, err = cli("reproduce", "--rerun", "gridcoarsen", "--runs-dir", tmp_path / "runs")
    assert code == 2 and err.count("\n") == 1 and "reproduce --rerun: " in err and "--allow-dirty" in err
    assert not (tmp_path / "runs").exists()
