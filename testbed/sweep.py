"""Sweeps: expand a ``sweep:`` block into variant scenarios and run them in parallel.

Each variant is an ordinary run in ``<sweep>/variants/<slug>/`` (its scenario beside it as
``<slug>.yaml``), executed as its own ``testbed`` process so that a variant that crashes (or
starts and stops its own Ray, as Flower does) cannot take the others down. On the ``local`` engine
variants run side by side on this machine; on the ``ray`` engine each variant runs on some node of
the cluster (the run folder must then be on a filesystem every node sees, as on a Slurm cluster).
Running or resuming a sweep again skips the variants that completed. The variants are placed by
the engine's `map` primitive (see `testbed.engines.registry.placement_engine`): threads of this
process, or placement hosts on the cluster's machines, each thread waiting on one variant process.

A variant's process is forked from a warm server (`testbed.engines.warm`, one per machine) that
imported torch, scikit-learn and the kind's modules once (`testbed.kinds.warm_modules`), so it
starts in milliseconds instead of seconds; it is still a process of its own, with its exit code.
``sweep.processes: fresh`` starts a new interpreter per variant instead; ``shared`` runs the variants
of each of the ``parallel`` slots one after another in one warm process that keeps its Ray and its
client actors (`testbed.sweep_shared`).

Ctrl-C on a sweep on this machine is passed on to the variant processes running (each stops as a
run does, resumable), no further variant starts, and the sweep exits 130 once they have exited;
`testbed resume` on the sweep folder continues them.

While the variants run, `testbed.sweep_status` shows them (queued / running / done / failed, with
the current metric) from their folders: a live table on a terminal, a line per finished variant in
a log, nothing under ``--quiet``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import kinds, sweep_shared
from testbed.engines.config import EngineSettings
from testbed.engines.registry import placement_engine
from testbed.engines.warm import WarmProcess, WarmServerError, warm_server
from testbed.errors import RunInterrupted, ScenarioError, UserError
from testbed.interrupts import interrupt_hook
from testbed.loading import apply_override, validate_raw
from testbed.run import RunFolder, atomic_write
from testbed.scenario import Scenario
from testbed.sweep_names import axis_labels, short_value
from testbed.sweep_status import SweepMonitor, display_mode, failure_marker
from testbed.trackers import sweep_tracking
from testbed.validation import preflight

# The most variants a sweep runs: each is a run folder and a process, and `testbed validate` checks
# every one (about 5 ms each); far above the bundled sweeps (at most a few dozen).
MAX_VARIANTS = 10_000
MAX_SLUG = 160  # characters of a variant's folder name
SLUG_TAIL = 40  # of a longer one, the characters kept at its end

# The variant processes this process runs now, and whether the sweep was interrupted (no new ones).
_variant_processes: set[subprocess.Popen | WarmProcess] = set()
_variants_guard = threading.Lock()
_interrupted = threading.Event()
VARIANT_STOP_S = 60.0  # how long an interrupted variant may take to stop before it is killed
CLI = "testbed.cli"  # the module a variant process runs, as ``python -m testbed.cli``


def expand_variants(raw: dict[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """Every variant of a sweep as ``{slug: raw scenario}``, each validated as a run would be."""
    sweep = raw.get("sweep") or {}
    base = {k: v for k, v in raw.items() if k not in ("sweep", "claims")}
    grid = sweep.get("grid") or {}
    _check_size(grid, sweep.get("variants") or [{}], source)
    labels = {key: axis_labels(values) for key, values in grid.items()}
    # Positions, not values, pick a point's labels: 1 and 1.0 are equal but two values of an axis.
    positions = list(itertools.product(*(range(len(values)) for values in grid.values()))) or [()]
    variants: dict[str, dict[str, Any]] = {}
    for extra in sweep.get("variants") or [{}]:
        for position in positions:
            point = {key: grid[key][i] for key, i in zip(grid, position)}
            overrides = {**extra, **point}
            slug = variant_slug(overrides, {key: labels[key][i] for key, i in zip(grid, position)})
            if slug in variants:
                raise ScenarioError(f"{source}: sweep: two variants would share the folder name {slug!r}; "
                                    "give the values of each grid key (and each variants entry) names or keys "
                                    "that differ")
            variant = copy.deepcopy(base)
            for key, value in overrides.items():
                try:
                    apply_override(variant, f"{key}={json.dumps(value)}")
                except ScenarioError as err:  # worded for --set: say where the sweep names it instead
                    raise ScenarioError(f"{source}: sweep: {key}: {str(err).split(': ', 1)[-1]}") from None
            variant["name"] = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{base.get('name', 'sweep')}-{slug}")[:120]
            label = f"{source} (sweep variant {slug})"
            preflight(validate_raw(variant, source=label), label)
            variants[slug] = variant
    return variants


def _check_size(grid: dict[str, list[Any]], extras: list[dict[str, Any]], source: str) -> None:
    """Refuse, before any variant is built, a sweep whose variants are no runs (an empty axis, a key
    that changes the sweep itself) or more than `MAX_VARIANTS` of them: counted as the product of the
    axes' lengths, never listed."""
    for where, keys in [("sweep.grid", grid), *((f"sweep.variants.{i}", extra) for i, extra in enumerate(extras))]:
        for key in keys:
            if str(key).split(".", 1)[0] in ("sweep", "claims"):
                raise ScenarioError(f"{source}: {where}: {key}: a variant is one run, which cannot change the "
                                    f"sweep's own '{str(key).split('.', 1)[0]}' block")
    for key, values in grid.items():
        if not values:
            raise ScenarioError(f"{source}: sweep.grid.{key}: an empty list leaves the sweep no variant; give at "
                                "least one value or drop the key")
    count = len(extras) * math.prod(len(values) for values in grid.values())
    if count > MAX_VARIANTS:
        axes = " x ".join([*(str(len(values)) for values in grid.values()), *([str(len(extras))] * (len(extras) > 1))])
        raise ScenarioError(f"{source}: sweep: {axes} = {count} variants; a sweep runs at most {MAX_VARIANTS}, "
                            "split it into several scenarios or shorten its grid")


def variant_slug(overrides: dict[str, Any], labels: dict[str, str] | None = None) -> str:
    """A folder name that says what the variant changes, e.g. ``strategy.name=krum,seed=1``
    (``labels``: how a grid axis names its values, see `axis_labels`)."""
    if not overrides:
        return "base"
    labels = labels or {}
    parts = [f"{key.split('.', 1)[-1] if key.count('.') > 1 else key}={labels.get(key) or short_value(value)}"
             for key, value in overrides.items()]
    slug = re.sub(r"[^A-Za-z0-9_.=,+-]", "_", ",".join(parts))
    if len(slug) <= MAX_SLUG:
        return slug
    # A file name holds 255 bytes (with the temporary name's prefix and suffix around it): a long
    # slug keeps its start and its end (the grid point, e.g. the seed), readable, with a hash of the
    # whole between them, so it stays unique.
    digest = hashlib.sha256(slug.encode()).hexdigest()[:12]
    tail = slug[-SLUG_TAIL:]
    return f"{slug[:MAX_SLUG - len(digest) - 2 - SLUG_TAIL]}+{digest}+{tail}"


def run_sweep(raw: dict[str, Any], scenario: Scenario, source: str, run_dir: Path, quiet: bool,
              only: set[str] | None = None, parallel: int | None = None, overrides: Sequence[str] = (),
              reports: bool = True) -> RunFolder:
    """Run (or continue) every variant (or those of ``only``, ``parallel`` at once instead of the
    sweep's own setting); failures are recorded, not raised. A sweep with a ``claims:`` block ends
    with its verdicts in ``claims.json`` and the report. ``reports`` False: neither the variants nor
    the sweep render a report (seconds of plotting each, for a sweep nobody looks at: reproduce's
    test size); `testbed report` renders one later."""
    variants = expand_variants(raw, source)
    if scenario.claims is not None:
        from testbed.claims.evaluate import check_claims

        check_claims(scenario.claims, variants, source)
    if only is not None:
        variants = {slug: variant for slug, variant in variants.items() if slug in only}
    sweep_shared.check(scenario, source)
    sweep_run = _open_sweep_folder(run_dir, raw, overrides)  # locked: one sweep process at a time
    _interrupted.clear()
    try:
        with interrupt_hook(_interrupt_variants), sweep_tracking(sweep_run, scenario):  # MLflow's parent run
            _run_variants(sweep_run, variants, scenario, source, parallel, quiet, reports)
    except KeyboardInterrupt:
        raise RunInterrupted(sweep_run.path) from None
    finally:
        sweep_run.unlock()
    return sweep_run


def _interrupt_variants() -> None:
    """Ctrl-C: start no other variant, and pass SIGINT on to those running."""
    _interrupted.set()
    with _variants_guard:
        running = list(_variant_processes)
    for process in running:
        try:
            process.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass


def _run_variants(sweep_run: RunFolder, variants: dict[str, dict[str, Any]], scenario: Scenario, source: str,
                  parallel: int | None, quiet: bool = True, reports: bool = True) -> None:
    variants_dir = sweep_run.path / "variants"
    variants_dir.mkdir(exist_ok=True)
    for slug, variant in variants.items():
        atomic_write(variants_dir / f"{slug}.yaml", yaml.safe_dump(variant, sort_keys=False).encode())
        failure_marker(variants_dir / slug).unlink(missing_ok=True)  # an earlier sweep's: this one retries it
    assert scenario.sweep is not None  # the CLI runs sweep scenarios only here
    processes = scenario.sweep.processes
    warm = kinds.warm_modules(scenario.kind) if processes in ("warm", "shared") else None
    zygote = kinds.launches_ranks(scenario.kind)
    folders = [str(variants_dir / slug) for slug in variants]
    parallel = parallel or scenario.sweep.parallel or max(1, (os.cpu_count() or 2) // 2)
    monitor = SweepMonitor(variants_dir, list(variants), display_mode(quiet), tuple(scenario.sweep.metrics[:1]))
    with monitor, placement_engine(scenario.engine) as engine:
        if processes == "shared":
            slots = sweep_shared.slots(folders, parallel)
            ran = engine.map(run_shared_slot, [(slot, scenario.engine, warm, reports) for slot in slots],
                             parallel=parallel)
            by_folder = {folder: result for slot, results in zip(slots, ran) for folder, result in zip(slot, results)}
            results = [by_folder[folder] for folder in folders]
        else:
            results = engine.map(run_variant, [(folder, scenario.engine, warm, reports, zygote) for folder in folders],
                                 parallel=parallel)
        statuses = {slug: result for slug, result in zip(variants, results)}
        monitor.close(statuses)
    sweep_run.write_summary({"name": scenario.name, "kind": "sweep", "variants": statuses,
                             "completed": sum(r["status"] == "completed" for r in statuses.values()),
                             "failed": sum(r["status"] == "failed" for r in statuses.values())})
    if scenario.claims is not None:
        from testbed.claims.sweeps import write_sweep_claims

        write_sweep_claims(sweep_run, scenario.claims, variants, source)
    if reports:
        from testbed.report.sweep import render_sweep_report

        render_sweep_report(sweep_run)


def _open_sweep_folder(run_dir: Path, raw: dict[str, Any], overrides: Sequence[str]) -> RunFolder:
    """A new sweep folder, or the same sweep's folder again (then finished variants are skipped)."""
    existing = RunFolder(run_dir)
    if existing.config_path.is_file():
        existing.lock()
        if _what_runs(existing.read_config()) != _what_runs(raw):
            existing.unlock()
            raise UserError(f"{run_dir}: holds a different sweep; use another --run-dir")
        return existing
    return RunFolder.create(run_dir, raw, overrides)


def _what_runs(raw: dict[str, Any]) -> dict[str, Any]:
    """A sweep's config without what changes no variant: its claims (rewording a claim, or adding
    one), its description, and how many variant processes run at once and how they start (a sweep
    continues with ``sweep.processes=fresh`` or another ``sweep.parallel``)."""
    what = {k: v for k, v in raw.items() if k not in ("claims", "description")}
    if isinstance(what.get("sweep"), dict):
        what["sweep"] = {k: v for k, v in what["sweep"].items() if k not in ("processes", "parallel")}
    return what


def run_variant(folder: str, engine: EngineSettings, warm_modules: Sequence[str] | None = None,
                report: bool = True, zygote: bool = False) -> dict[str, Any]:
    """Run one variant in its own ``testbed`` process (resume it if it started before), with the
    environment ``engine`` gives child processes on the machine that runs it: forked from this
    process's warm server that imported ``warm_modules`` (`testbed.engines.warm`), or, with None,
    a fresh interpreter; ``report`` False: ``--no-report``; ``zygote``: a warm variant gets one,
    to fork the training rank it launches from."""
    run = RunFolder(folder)
    if _interrupted.is_set():
        return _failed(run, {"status": "failed", "exit_code": 130, "error": "interrupted before it started"})
    if run.completed:
        summary = run.read_summary()
        assert summary is not None  # a completed run has its summary
        return {"status": "completed", "skipped": True, "final_metrics": summary["final_metrics"]}
    if run.config_path.is_file():
        command = ["resume", folder]
    else:
        command = ["run", f"{folder}.yaml", "--run-dir", folder]
    env = engine.child_environment({**os.environ, "CI": os.environ.get("CI", "1")})
    try:
        returncode, out, err = _run_variant_process([*command, "--quiet", *([] if report else ["--no-report"])], env,
                                                    warm_modules, zygote)
    except WarmServerError as exc:
        return _failed(run, {"status": "failed", "exit_code": 1,
                             "error": f"{exc}; --set sweep.processes=fresh starts each variant afresh"})
    if returncode == 0 and run.completed:
        return {"status": "completed", "skipped": False, "final_metrics": run.read_summary()["final_metrics"]}
    lines = (err or out).strip().splitlines()
    error = lines[-1] if lines else f"killed by signal {-returncode}" if returncode < 0 else "no output"
    return _failed(run, {"status": "failed", "exit_code": returncode, "error": error})


def run_shared_slot(folders: list[str], engine: EngineSettings, warm_modules: Sequence[str] | None = None,
                    report: bool = True) -> list[dict[str, Any]]:
    """Run the variants ``folders`` one after another in one process (`testbed.sweep_shared`),
    forked from this process's warm server (or fresh, with None); each one's result as `run_variant`
    gives it."""
    done_before = {folder for folder in folders if RunFolder(folder).completed}
    returncode = 0
    if not _interrupted.is_set() and len(done_before) < len(folders):
        env = engine.child_environment({**os.environ, "CI": os.environ.get("CI", "1")})
        try:
            returncode, _, _ = _run_variant_process(sweep_shared.slot_arguments(folders, report), env, warm_modules,
                                                    module=sweep_shared.MODULE)
        except WarmServerError as exc:
            return [_failed(RunFolder(folder), {"status": "failed", "exit_code": 1, "error": str(exc)})
                    for folder in folders]
    return [_shared_result(RunFolder(folder), folder in done_before, returncode) for folder in folders]


def _shared_result(run: RunFolder, done_before: bool, returncode: int) -> dict[str, Any]:
    """A variant's result once its slot's process has exited: from its folder, or from the failure
    marker the slot wrote, or, where it wrote none, why the variant never finished."""
    if run.completed:
        summary = run.read_summary()
        assert summary is not None  # a completed run has its summary
        return {"status": "completed", "skipped": done_before, "final_metrics": summary["final_metrics"]}
    marker = failure_marker(run.path)
    if marker.is_file():
        return json.loads(marker.read_text())
    if _interrupted.is_set() or returncode == 130:
        return _failed(run, {"status": "failed", "exit_code": 130, "error": "interrupted before it finished"})
    what = f"killed by signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
    return _failed(run, {"status": "failed", "exit_code": returncode,
                         "error": f"its shared process ended ({what}) before it finished"})


def _failed(run: RunFolder, result: dict[str, Any]) -> dict[str, Any]:
    """``result``, also left beside the variant's folder (where the sweep's status display, which
    may run on another node than this variant, reads it)."""
    try:
        atomic_write(failure_marker(run.path), json.dumps(result).encode())
    except OSError:  # the result still reaches the sweep through the engine; the marker only shows it sooner
        pass
    return result


def _run_variant_process(args: list[str], env: dict[str, str], warm_modules: Sequence[str] | None,
                         zygote: bool = False, module: str = CLI) -> tuple[int, str, str]:
    """Run a variant's ``testbed ARGS`` process (or another ``module``'s: a shared slot's) to its
    end: its exit code, stdout and stderr. Interrupted (the sweep's SIGINT is passed on to it), it is
    given `VARIANT_STOP_S` to stop as a run does before it is killed."""
    process: subprocess.Popen | WarmProcess
    if warm_modules is None:
        process = subprocess.Popen([sys.executable, "-m", module, *args], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    else:
        process = warm_server(warm_modules, env).start(module, args, zygote=zygote)
    with process:
        with _variants_guard:
            _variant_processes.add(process)
        if _interrupted.is_set():  # Ctrl-C came while it started (a warm server's first imports take seconds)
            process.send_signal(signal.SIGINT)
        try:
            try:
                out, err = process.communicate()
            except KeyboardInterrupt:  # the sweep runs this variant in its main thread
                try:
                    process.wait(VARIANT_STOP_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                raise
        finally:
            with _variants_guard:
                _variant_processes.discard(process)
    assert process.returncode is not None  # communicate() returned: it has exited
    return process.returncode, out, err
