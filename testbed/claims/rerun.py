"""``testbed reproduce --rerun``: re-run result files whole at HEAD, over as many sessions and machines as it takes.

A stale result file whose sample does not hold (`testbed.claims.check`) is re-run whole at one
code state. Some take longer than a session (sdea-glyphs: 215 Flower runs, 537 minutes summed over
its runs), and the machine that ran half of them may be gone the next day. So the re-run keeps
the published file in place until every variant has run again, and keeps the runs done so far in a
file of its own, ``docs/reproduction/results/rerun/<scenario>.json``, a result file like the
others that the docs do not read. Committed, it lets any checkout of the same code resume: the
variants it holds are not run again. Its records whose code is no longer HEAD's (a module edited
between sessions) are dropped and run again.

The sweep runs in ``<runs-dir>/rerun/<size>/testbed-<tree>/<scenario>/``, a folder per state of the
testbed's code (`reproduce.code_folder`). So a re-run never collects a variant completed on other
code, resumes a variant it interrupted from its checkpoints on the same machine, and counts the
variants of a sampled check that ran there and did not hold. After the sweeps (or an interrupt) the
completed runs are added to the re-run's file; once it holds every variant it replaces the published
file, and the docs of its paper are written.
A run made on a tree with uncommitted changes is not added (``--allow-dirty`` adds it marked).
``--docs-only`` runs nothing: it adds what the sweep folders completed so far.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.claims import check, results
from testbed.claims.reproduce import (
    ScenarioClaims,
    chosen_scenarios,
    code_folder,
    code_state,
    load,
    refuse_dirty,
    reproduce,
    rerun_path,
    result_path,
    shown_path,
)
from testbed.engines.warm import servers_kept
from testbed.loading import validate_raw
from testbed.provenance import source_commit


def rerun_results(root: Path, names: list[str], size: str, runs_dir: Path, run: bool, quiet: bool,
                  parallel: int | None = None, allow_dirty: bool = False) -> list[str]:
    """Re-run (unless ``run`` is False) the result files of the papers or scenarios named, keep what
    completed, replace each file whose re-run is complete and rewrite its paper's docs: the lines to print."""
    dirty_ok = allow_dirty or size == "test"
    if run and not dirty_ok:
        refuse_dirty("reproduce --rerun")
    items = [(paper, load(root, path, size)) for paper, paths in chosen_scenarios(names).items() for path in paths]
    code = code_state(source_commit())
    sweeps = [code_folder(runs_dir, size, item.path, code) for _, item in items]
    interrupted = False
    try:
        if run:
            with servers_kept():
                for (_, item), sweep in zip(items, sweeps, strict=True):
                    _run(item, root, size, runs_dir, sweep, quiet, parallel)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # Kept once every sweep has run, or on an interrupt: a file written between two sweeps would
        # leave the checkout with uncommitted changes under the later ones (`reproduce.reproduce`).
        outcomes = [(paper, keep(item, root, size, runs_dir, sweep, dirty_ok))
                    for (paper, item), sweep in zip(items, sweeps, strict=True)]
    lines = [line for _, (line, _) in outcomes]
    if interrupted:
        raise RerunInterrupted(lines, "testbed reproduce --rerun " + " ".join(names))
    complete = sorted({paper for paper, (_, done) in outcomes if done})
    return lines + (reproduce(root, complete, size, runs_dir, run=False, quiet=quiet) if complete else [])


class RerunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a re-run: ``lines`` say what was kept, and ``command`` (not the sweep's
    ``testbed resume``, which would run its variants without keeping them) continues it."""

    def __init__(self, lines: list[str], command: str):
        super().__init__(command)
        self.lines, self.command = lines, command


def done_so_far(item: ScenarioClaims, root: Path, size: str, runs_dir: Path) -> dict[str, dict[str, Any]]:
    """The re-run's records of ``item`` that still count: those of its variants, on HEAD's code."""
    kept = results.current(results.read_results(rerun_path(root, item.path, size, runs_dir)), item.variants)
    stale = check.stale_records(kept)
    return {slug: record for slug, record in kept.items() if slug not in stale}


def _run(item: ScenarioClaims, root: Path, size: str, runs_dir: Path, sweep: Path, quiet: bool,
         parallel: int | None) -> None:
    from testbed.sweep import run_sweep

    missing = set(item.variants) - set(done_so_far(item, root, size, runs_dir))
    source = str(Path("scenarios") / item.path)
    if missing:
        run_sweep(item.raw, validate_raw(item.raw, source), source, sweep, quiet, only=missing, parallel=parallel,
                  reports=size == "full")


def keep(item: ScenarioClaims, root: Path, size: str, runs_dir: Path, sweep: Path,
         dirty_ok: bool) -> tuple[str, bool]:
    """Add the variants completed in the sweep folder ``sweep`` to the re-run's file; replace the published
    file with it once it holds every variant. The line to print, and whether it is complete."""
    source = str(Path("scenarios") / item.path)
    pending, published = rerun_path(root, item.path, size, runs_dir), result_path(root, item.path, size, runs_dir)
    kept = done_so_far(item, root, size, runs_dir)
    for slug in sorted(set(item.variants) - set(kept)):
        record = results.record_of(sweep / "variants" / slug, item.variants[slug])
        if record is not None and (dirty_ok or not str(record["commit"]).endswith("+dirty")):
            kept[slug] = record
    if len(kept) < len(item.variants):
        if kept != results.read_results(pending):
            results.write_results(pending, source, kept)
        return (f"re-run of {shown_path(published, root)}: {len(kept)} of {len(item.variants)} variants so far, "
                f"kept in {shown_path(pending, root)} (commit it: `testbed reproduce --rerun {item.path}` resumes "
                "from it on any machine; the published file stays until the re-run is complete)", False)
    results.write_results(published, source, kept)
    pending.unlink(missing_ok=True)
    line = f"re-ran {shown_path(published, root)} whole: {len(kept)} variants, {results.provenance_line(kept.values())}"
    return line, True
