"""``testbed reproduce``: run or resume the claim sweeps of some papers, keep their results, write the docs.

For each paper of `testbed.claims.papers.PAPERS` asked for, each of its scenarios runs as a sweep in
``runs/reproduce/<size>/<scenario>/`` (only the variants some claim reads, and at full size only
those the result file lacks or holds stale), as ``testbed run`` would run it; a second call resumes
the same folders. Once every sweep has run, the completed variants' final metrics are merged into
the scenarios' result files (``--docs-only`` runs nothing but still merges what the sweep folders
completed so far, so the finished runs of an interrupted reproduce are kept); then the statements are evaluated and
``docs/reproduction.md`` and the per-paper tables are written from the result files of every paper
(so reproducing one paper rewrites only its rows).

At full size the results are recorded from a clean tree only: with uncommitted changes reproduce
refuses to run, and does not merge a run made on one, unless ``--allow-dirty`` (the record's commit
then reads ``<commit>+dirty``). ``--check`` runs nothing by default: it lists the result files whose
code fingerprint differs from HEAD's, and with ``--sample N`` re-runs a sample of each at HEAD and
records "verified at <commit>" where the verdicts and numbers hold (`testbed.claims.check`).
``--rerun`` re-runs a file whole, keeping the published one until the re-run is complete
(`testbed.claims.rerun`).

``--size test`` applies each scenario's ``claims.test_size`` over the kind's test size, with two
seeds, writes its result files and docs under the runs folder (never the repository's docs) and
checks that every predicate evaluates; its verdicts mean nothing, so its sweeps render no reports
(plotting took longer than training a variant at that size; ``testbed report`` renders one), and
run their variants in shared processes where they may (`testbed.sweep_shared`: a tiny federated
variant was mostly the start of its Ray and its client actor).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import sweep_shared
from testbed.claims import check, docs, results
from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import Verdict, check_claims, evaluate, selects
from testbed.claims.papers import PAPERS
from testbed.engines.warm import servers_kept
from testbed.errors import ScenarioError, UserError, did_you_mean
from testbed.loading import apply_override, load_raw, validate_raw
from testbed.provenance import source_commit

# What --size test changes in every scenario of a kind, before the scenario's own claims.test_size.
KIND_TEST_SIZE: dict[str, dict[str, Any]] = {
    "workload": {"training.steps": 4, "training.eval_every": 2, "training.checkpoint_every": 2},
    # One round: a Flower run this small is mostly the start-up of Ray and its client actor (about 8
    # of its 12 s of CPU), and every predicate reads the last round's metrics as it would the 10th.
    "federated": {"federated.rounds": 1},
    "decentralized": {"decentralized.steps": 4, "decentralized.eval_every": 2, "decentralized.checkpoint_every": 2},
    "pretrain": {"pretrain.steps": 4, "pretrain.eval_every": 2, "pretrain.checkpoint_every": 2,
                 "pretrain.warmup_steps": 1, "pretrain.eval_documents": 4,
                 "pretrain.tokenizer.train_documents": 50, "pretrain.tokenizer.vocab_size": 512},
}
TEST_SEEDS = [0, 1]
SIZES = ("full", "test")


CHECKOUT = Path(__file__).resolve().parents[2]  # the checkout this testbed package runs from


@dataclass(frozen=True)
class ScenarioClaims:
    """One scenario of a paper, as reproduce runs it: its raw sweep, claims and variants."""

    path: str  # under scenarios/
    raw: dict[str, Any]
    claims: ClaimsConfig
    variants: dict[str, dict[str, Any]]  # every variant some claim reads


def repository_root() -> Path:
    """The checkout whose scenarios and docs reproduce works on: this directory, or the one the
    testbed package was installed from (editable)."""
    for candidate in (Path.cwd(), CHECKOUT):
        if (candidate / "scenarios").is_dir() and (candidate / "docs").is_dir():
            return candidate
    raise UserError("reproduce: run it in a testbed checkout (no scenarios/ and docs/ here)")


def load(root: Path, path: str, size: str) -> ScenarioClaims:
    """Read a paper's scenario at ``size``, checked like ``testbed validate``, its variants narrowed
    to those the claims read."""
    from testbed.sweep import expand_variants

    source = str(Path("scenarios") / path)
    raw = load_raw(root / "scenarios" / path)
    if not isinstance(raw.get("claims"), dict):
        raise ScenarioError(f"{source}: claims: required (testbed.claims.papers lists this scenario)")
    if size == "test":
        raw = test_sized(raw, source)
    scenario = validate_raw(raw, source)
    assert scenario.claims is not None and scenario.sweep is not None  # the schema: claims need a sweep
    if scenario.claims.paper is None:  # a researcher's own claims belong in their sweep's report
        raise ScenarioError(f"{source}: claims.paper: required (testbed.claims.papers lists this scenario; only "
                            "a paper's claims go into docs/reproduction.md)")
    variants = expand_variants(raw, source)
    check_claims(scenario.claims, variants, source)
    arms = scenario.claims.arms.values()
    read = {slug: variant for slug, variant in variants.items() if any(selects(arm, variant) for arm in arms)}
    return ScenarioClaims(path, raw, scenario.claims, read)


def test_sized(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The scenario at the test size: the kind's small settings, then the claims block's own."""
    sized = copy.deepcopy(raw)
    claims = sized["claims"]
    own = (claims.get("test_size") or {}) if isinstance(claims, dict) else {}
    for key, value in {**KIND_TEST_SIZE.get(str(raw.get("kind")), {}), **(own.get("set") or {})}.items():
        try:
            apply_override(sized, f"{key}={json.dumps(value)}")
        except ScenarioError as err:
            raise ScenarioError(f"{source}: claims.test_size.set: {key}: {str(err).split(': ', 1)[-1]}") from None
    sweep = sized.setdefault("sweep", {})
    sweep["parallel"] = max(2, sweep.get("parallel") or 0)  # tiny variants: two at a time even on 2 cores
    engine = sized.get("engine")
    engine_type = engine.get("type", "local") if isinstance(engine, dict) else "local"
    if sweep_shared.refusal(str(sized.get("kind")), str(engine_type)) is None:
        # Most of a tiny federated variant's CPU is starting Ray and a client actor: one slot's
        # variants share them (`testbed.sweep_shared`).
        sweep["processes"] = "shared"
    grid = sweep.setdefault("grid", {})
    grid.update({"seed": TEST_SEEDS, **(own.get("grid") or {})})
    claims["seeds"] = len(grid["seed"])
    claims.setdefault("fewer_seeds_because", "test size")
    return sized


def result_path(root: Path, path: str, size: str, runs_dir: Path) -> Path:
    base = root / "docs" / "reproduction" / "results" if size == "full" else runs_dir / "results"
    return base / path.replace(".yaml", ".json")


def rerun_path(root: Path, path: str, size: str, runs_dir: Path) -> Path:
    """The file that keeps a scenario's whole re-run until it is complete (`testbed.claims.rerun`)."""
    return result_path(root, str(Path("rerun") / path), size, runs_dir)


def shown_path(path: Path, root: Path) -> Path:
    """``path`` as a line shows it: relative to the checkout where it lies inside it."""
    return path.relative_to(root) if path.is_relative_to(root) else path


def chosen_papers(papers: list[str]) -> list[str]:
    """The papers asked for (all where none is), refusing an unknown one."""
    unknown = [p for p in papers if p not in PAPERS]
    if unknown:
        raise UserError(f"reproduce: unknown paper '{unknown[0]}'{did_you_mean(unknown[0], PAPERS)} "
                        f"(known: {', '.join(PAPERS)})")
    return papers or list(PAPERS)


def chosen_scenarios(names: list[str]) -> dict[str, list[str]]:
    """paper -> the scenarios asked for: a paper id takes all of its scenarios, a scenario path as
    `testbed list papers` prints it (``pretrain/outeffhop-opt.yaml``) only that one."""
    by_path = {path: paper for paper, entry in PAPERS.items() for path in entry.scenarios}
    papers = [name for name in names if name not in by_path]
    unknown = [name for name in papers if name.endswith(".yaml")]
    if unknown:
        raise UserError(f"reproduce: no paper has the scenario '{unknown[0]}'{did_you_mean(unknown[0], by_path)} "
                        "(`testbed list papers` lists each paper's scenarios)")
    chosen = {paper: list(PAPERS[paper].scenarios) for paper in (chosen_papers(papers) if papers or not names else [])}
    for name in names:
        if name in by_path and name not in chosen.setdefault(by_path[name], []):
            chosen[by_path[name]].append(name)
    return chosen


def refuse_dirty(what: str) -> None:
    """Refuse to record results from a tree with uncommitted changes: nobody could check out the code
    that gave them."""
    commit = source_commit()
    if commit is not None and commit.endswith("+dirty"):
        raise UserError(f"{what}: the testbed checkout has uncommitted changes (commit {commit}): commit them "
                        "first, or pass --allow-dirty to record results marked '+dirty'")


def reproduce(root: Path, papers: list[str], size: str, runs_dir: Path, run: bool, quiet: bool,
              parallel: int | None = None, allow_dirty: bool = False) -> list[str]:
    """Run (unless ``run`` is False), collect, evaluate and write the docs; the lines to print."""
    chosen = chosen_papers(papers)
    dirty_ok = allow_dirty or size == "test"  # the test size records nothing in the repository
    if run and not dirty_ok:
        refuse_dirty("reproduce")
    loaded = {paper: [load(root, path, size) for path in PAPERS[paper].scenarios] for paper in chosen}
    if run:
        with servers_kept():  # one warm server for the sweeps of every scenario, not one each
            for paper in chosen:
                for item in loaded[paper]:
                    _run(item, root, size, runs_dir, quiet, parallel)
    # Collected once every sweep has run: a result file changed earlier would leave the checkout with
    # uncommitted changes under the later sweeps, and their runs would record '<commit>+dirty'.
    refused = [f"not recorded: {item.path}: {slug}: run on a tree with uncommitted changes (--allow-dirty records it)"
               for paper in chosen for item in loaded[paper] for slug in collect(item, root, size, runs_dir, dirty_ok)]
    shown = list(PAPERS) if size == "full" else chosen  # the repository's docs list every paper
    loaded = {paper: loaded.get(paper) or [load(root, path, size) for path in PAPERS[paper].scenarios]
              for paper in shown}
    tables = {paper: [_table_entry(item, root, size, runs_dir) for item in items] for paper, items in loaded.items()}
    adjusted = docs.write_docs(root / "docs" if size == "full" else runs_dir / "docs", tables, size)
    return refused + [f"{paper}: {verdict.statement.id}: {docs.verdict_summary(verdict)}"
                      f"{_numbers(verdict, item.claims.level)}"
                      for paper in chosen for item, verdicts, _ in adjusted[paper] for verdict in verdicts]


def _numbers(verdict: Verdict, level: float) -> str:
    """``; left vs right, margin m [lo, hi] ...`` for a statement checked on one group."""
    if len(verdict.groups) != 1:
        return ""
    group = verdict.groups[0]
    return f"; {docs.describe_side(group.predicate, level)}" if group.seeds else " (not measured yet)"


def _table_entry(item: ScenarioClaims, root: Path, size: str,
                 runs_dir: Path) -> tuple[ScenarioClaims, list[Verdict], dict[str, Any]]:
    """A scenario's verdicts and the records they were called on, from its result file."""
    records = results.current(results.read_results(result_path(root, item.path, size, runs_dir)), item.variants)
    metrics: Mapping[str, Mapping[str, float]] = {slug: r["final_metrics"] for slug, r in records.items()}
    return item, evaluate(item.claims, item.variants, metrics, str(Path("scenarios") / item.path)), records


def _run(item: ScenarioClaims, root: Path, size: str, runs_dir: Path, quiet: bool, parallel: int | None) -> None:
    """Run the variants the result file lacks (resuming the sweep folder), then collect them."""
    from testbed.sweep import run_sweep

    kept = results.current(results.read_results(result_path(root, item.path, size, runs_dir)), item.variants)
    missing = {slug for slug in item.variants if slug not in kept}
    source = str(Path("scenarios") / item.path)
    if missing:
        run_sweep(item.raw, validate_raw(item.raw, source), source, sweep_folder(item, size, runs_dir), quiet,
                  only=missing, parallel=parallel, reports=size == "full")


def sweep_folder(item: ScenarioClaims, size: str, runs_dir: Path) -> Path:
    return runs_dir / size / item.path.replace(".yaml", "")


def collect(item: ScenarioClaims, root: Path, size: str, runs_dir: Path, allow_dirty: bool = True) -> list[str]:
    """Merge the variants completed in the sweep folder (if there is one) into the result file, keeping
    the records it has: an interrupted sweep's finished runs are kept, and a rerun changes no byte.
    Without ``allow_dirty`` a run made on a tree with uncommitted changes is left out: the slugs
    left out."""
    result_file = result_path(root, item.path, size, runs_dir)
    old = results.read_results(result_file)
    kept = results.current(old, item.variants)
    folder = sweep_folder(item, size, runs_dir)
    refused = []
    for slug in item.variants:
        record = results.record_of(folder / "variants" / slug, item.variants[slug]) if slug not in kept else None
        if record is not None and not allow_dirty and str(record["commit"]).endswith("+dirty"):
            refused.append(slug)
        elif record is not None:
            kept[slug] = record
    if kept != old:
        results.write_results(result_file, str(Path("scenarios") / item.path), kept)
    return refused


def check_results(root: Path, papers: list[str], size: str, runs_dir: Path, sample: int | None, quiet: bool,
                  parallel: int | None = None, allow_dirty: bool = False) -> list[str]:
    """``--check``: a line per result file of the papers (stale or current); with ``sample``, re-run a
    sample of each stale one at HEAD and mark it verified where it holds. Writes no docs."""
    chosen = chosen_scenarios(papers)
    dirty_ok = allow_dirty or size == "test"
    if sample is not None and not dirty_ok:
        refuse_dirty("reproduce --check --sample")  # a verification names the commit it ran at
    lines: list[str] = []
    with servers_kept():
        for paths in chosen.values():
            for path in paths:
                lines += _check_file(load(root, path, size), root, size, runs_dir, sample, quiet, parallel, dirty_ok)
    return lines


def _check_file(item: ScenarioClaims, root: Path, size: str, runs_dir: Path, sample: int | None, quiet: bool,
                parallel: int | None, allow_dirty: bool) -> list[str]:
    result_file = result_path(root, item.path, size, runs_dir)
    shown = shown_path(result_file, root)
    records = results.current(results.read_results(result_file), item.variants)
    if not records:
        return [f"not run: {shown} (testbed reproduce runs it)"]
    stale = check.stale_records(records)
    if not stale:
        return [f"current: {shown}: {len(records)} variants, {results.provenance_line(records.values())}"]
    head = f"stale: {shown}: {len(stale)} of {len(records)} variants ({check.summarise(stale)}); "
    pending = rerun_path(root, item.path, size, runs_dir)
    if pending.is_file():  # `testbed reproduce --rerun` is re-running it whole: no sample
        done = len(results.current(results.read_results(pending), item.variants))
        return [f"{head}a whole re-run is under way: {done} of {len(item.variants)} variants in "
                f"{shown_path(pending, root)}"]
    drawn = check.draw_sample(records, item.variants, item.claims.arms, sample or 0, item.path)
    lines = [f"{head}a sample of {len(drawn)} variants re-runs in about {check.duration(records, drawn)}, "
             f"the whole file in {check.duration(records, list(records))}"]
    if sample is None:
        return lines
    return lines + _verify(item, records, drawn, result_file, shown, size, runs_dir, quiet, parallel, allow_dirty)


def code_folder(runs_dir: Path, size: str, scenario: str, code: str | None) -> Path:
    """Where ``--check --sample`` re-runs a scenario's sample and ``--rerun`` re-runs it whole: a
    folder per state of the testbed's code (`code_state`), so that either resumes across commits
    that changed no module (a sweep of hours spans sessions, and each session commits results and
    docs), and one on other code meets neither the variants (run on other code) nor the sweep of an
    earlier one. The two share it: a sample that does not hold counts towards the whole re-run it
    calls for."""
    return runs_dir / "rerun" / size / (code or "unknown") / scenario.replace(".yaml", "")


def code_state(commit: str | None, repo: Path = CHECKOUT) -> str | None:
    """``testbed-<tree>``: the git tree of ``repo``'s ``testbed/`` package at HEAD, the same for every
    commit that left the code alone; ``commit`` itself (`source_commit`) where it is ``+dirty``, whose
    code no tree names, or None (no git checkout)."""
    if commit is None or commit.endswith("+dirty"):
        return commit
    try:
        tree = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD:testbed"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return commit
    return f"testbed-{tree.stdout.strip()}" if tree.returncode == 0 else commit


def _verify(item: ScenarioClaims, records: dict[str, dict[str, Any]], drawn: list[str], result_file: Path,
            shown: Path, size: str, runs_dir: Path, quiet: bool, parallel: int | None, allow_dirty: bool) -> list[str]:
    """Re-run the sample at HEAD, compare, and mark the file verified where it holds."""
    from testbed.sweep import run_sweep

    source = str(Path("scenarios") / item.path)
    folder = code_folder(runs_dir, size, item.path, code_state(source_commit()))
    run_sweep(item.raw, validate_raw(item.raw, source), source, folder, quiet, only=set(drawn), parallel=parallel)
    rerun = {slug: results.record_of(folder / "variants" / slug, item.variants[slug]) for slug in drawn}
    missing = sorted(slug for slug, record in rerun.items() if record is None)
    if missing:
        return [f"  not checked: {shown}: {len(missing)} sampled variants did not complete ({missing[0]}, ...)"]
    done = {slug: record for slug, record in rerun.items() if record is not None}
    if not allow_dirty and check.stale_records(done):
        return [f"  not checked: {shown}: the sample in {folder} ran on other code than HEAD's (remove it)"]
    problems, largest, where = check.compare(item.claims, item.variants, records, done, source)
    seeds = sorted({int(records[slug]["seed"]) for slug in drawn})
    head = f"  re-ran {len(drawn)} variants (seeds {', '.join(map(str, seeds))}): largest relative difference " \
           f"{largest:.2g} ({where})"
    if problems:
        return [f"{head}; does not hold (re-run it whole: remove {shown}, then testbed reproduce):",
                *(f"    {problem}" for problem in problems)]
    commit = source_commit() or "unknown"
    results.write_results(result_file, source, {**results.read_results(result_file),
                                                **check.mark_verified(records, done, item.variants, commit)})
    return [f"{head}; every verdict holds, rows within {check.TOLERANCE:.0%}: verified at {commit}"]
