"""The ``testbed`` command line.

    testbed run FILE [--set KEY=VALUE ...] [--run-dir DIR] [--quiet] [--verbose] [--no-sweep]
    testbed validate FILE... [--set KEY=VALUE ...] [--no-sweep]
    testbed --version
    testbed resume RUN_DIR [--quiet] [--verbose]
    testbed report RUN_DIR
    testbed compare RUN_DIR... [--metric M] [--out DIR]
    testbed list [workloads|strategies|attacks|topologies|datasets|trackers|scenarios|papers]
    testbed reproduce [PAPER ...] [--size full|test] [--docs-only] [--runs-dir DIR] [--parallel N] [--allow-dirty]
    testbed reproduce --check [PAPER ...] [--sample N] [--size full|test] [--allow-dirty]
    testbed reproduce --rerun PAPER... [--docs-only] [--size full|test] [--parallel N] [--allow-dirty]
    testbed cluster up [--nodes N] [--cpus-per-node C] [--head-cpus H] | down | status

Exit codes: 0 success, 2 a user error (one line on stderr, no traceback), 1 an internal error,
3 stopped on a failure outside the scenario (a lost node; resumable), 130 interrupted (resumable).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.errors import ResumableFailure, RunInterrupted, UserError, one_line

if TYPE_CHECKING:
    from testbed.run import RunFolder

REPO_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
LISTABLE = ("workloads", "strategies", "attacks", "topologies", "datasets", "trackers", "engines", "partitioners",
            "scenarios", "papers")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed", description="Run distributed-ML scenarios from YAML files.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a scenario file and write a run folder with a report")
    run.add_argument("file", help="scenario YAML file")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field, e.g. --set training.steps=50 (repeatable; type-checked)")
    run.add_argument("--run-dir", type=Path, help="run folder to create (default runs/<name>-<timestamp>)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--verbose", action="store_true",
                     help="libraries' logs and warnings (Ray, Flower, MLflow, opacus) on the console, "
                          "not in RUN_DIR/log.txt")
    run.add_argument("--no-sweep", action="store_true",
                     help="run the scenario once as written, ignoring its sweep: block")
    run.add_argument("--no-report", dest="report", action="store_false",
                     help="write no HTML report (nor a sweep's variants' reports); `testbed report` renders it later")

    validate = sub.add_parser("validate", help="check scenario files fully without starting anything")
    validate.add_argument("files", nargs="+", help="scenario YAML files")
    validate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="override applied to every file before checking")
    validate.add_argument("--no-sweep", action="store_true",
                          help="check each scenario as `run --no-sweep` would run it: once, ignoring its sweep: block")

    resume = sub.add_parser("resume", help="continue an interrupted run from its newest checkpoint")
    resume.add_argument("run_dir", type=Path)
    resume.add_argument("--quiet", action="store_true", help="no progress bars")
    resume.add_argument("--verbose", action="store_true",
                        help="libraries' logs and warnings on the console, not in RUN_DIR/log.txt")
    resume.add_argument("--no-report", dest="report", action="store_false",
                        help="write no HTML report (nor a sweep's variants' reports); `testbed report` renders "
                             "it later")

    report = sub.add_parser("report", help="re-render the report of a run folder")
    report.add_argument("run_dir", type=Path)
    report.add_argument("--audit", action="store_true", help=(
        "also write report/audit.html, one page an auditor can sign off: what the scenario promised (privacy, "
        "robustness), what the run measured, and whether each holds, is violated or too weak to tell"))

    compare = sub.add_parser("compare", help=(
        "put run folders (and sweep folders' variants) of one kind side by side on one page, "
        "with paired differences over shared seeds"))
    compare.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    compare.add_argument("--metric", help="the final metric to compare (default: test accuracy where all runs have it)")
    compare.add_argument("--out", type=Path, help="folder of the page (default runs/compare-<timestamp>)")

    listing = sub.add_parser("list", help=(
        "list registered workloads, strategies, attacks, topologies, datasets, trackers, engines, partitioners, "
        "scenarios or papers"))
    listing.add_argument("what", nargs="?", choices=LISTABLE, default="workloads")

    reproduce = sub.add_parser("reproduce", help=(
        "run or resume the claim sweeps of some papers (default: all) and write docs/reproduction.md"))
    reproduce.add_argument("papers", nargs="*", metavar="PAPER", help=(
        "paper ids (testbed list papers); with --check or --rerun also a scenario of one, e.g. "
        "pretrain/outeffhop-opt.yaml"))
    reproduce.add_argument("--size", choices=("full", "test"), default="full",
                           help="test: tiny settings and two seeds, to check that every predicate evaluates")
    reproduce.add_argument("--docs-only", action="store_true",
                           help="run nothing: rewrite the docs from the result files")
    reproduce.add_argument("--runs-dir", type=Path, default=Path("runs") / "reproduce",
                           help="where the sweeps run (default runs/reproduce)")
    reproduce.add_argument("--parallel", type=int, help="variants at once (default: each sweep's own setting)")
    reproduce.add_argument("--quiet", action="store_true", help="no progress bars")
    reproduce.add_argument("--allow-dirty", action="store_true",
                           help="record results from a checkout with uncommitted changes (marked '+dirty')")
    reproduce.add_argument("--check", action="store_true",
                           help="list the result files whose code fingerprint differs from HEAD's (stale)")
    reproduce.add_argument("--rerun", action="store_true",
                           help="re-run the result files whole at HEAD, the published ones kept until each re-run is "
                                "complete; the runs done so far go to docs/reproduction/results/rerun/ (commit it: "
                                "the re-run resumes from it on any machine); with --docs-only run nothing, only keep "
                                "what completed")
    reproduce.add_argument("--sample", type=int, metavar="N",
                           help="with --check: re-run N variants of each stale file at HEAD (at least two seeds "
                                "of every arm) and record it verified where every verdict holds")

    cluster = sub.add_parser("cluster", help="start, inspect or stop an emulated Ray cluster on this machine")
    cluster.add_argument("action", choices=("up", "down", "status"))
    cluster.add_argument("--nodes", type=int, default=3, help="nodes to start, head included (up)")
    cluster.add_argument("--cpus-per-node", type=int, default=1, help="CPUs each node offers (up)")
    cluster.add_argument("--head-cpus", type=int,
                         help="CPUs of the head (up; default --cpus-per-node, 0: drivers only)")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from testbed.execute import default_run_dir, start_run
    from testbed.loading import load_raw, validate_raw
    from testbed.sweep import run_sweep

    raw = _without_sweep(load_raw(args.file, args.overrides)) if args.no_sweep else load_raw(args.file, args.overrides)
    scenario = validate_raw(raw, args.file, args.overrides)
    if scenario.sweep is not None:
        run = run_sweep(raw, scenario, args.file, args.run_dir or default_run_dir(scenario), args.quiet,
                        overrides=args.overrides, reports=args.report)
        _print_sweep_outcome(run)
    else:
        run = start_run(scenario, args.file, args.run_dir, args.quiet, args.overrides, args.verbose, args.report)
    _print_report_line(run, args.report)
    return 0


def _without_sweep(raw: dict) -> dict:
    # The base scenario of a sweep file is a complete scenario of its own: one file serves
    # both the quick single run and its multi-seed sweep.
    raw.pop("sweep", None)
    raw.pop("claims", None)  # its arms are the sweep's variants
    return raw


def _version() -> str:
    import importlib.metadata

    from testbed.provenance import source_commit

    commit = source_commit()
    return f"testbed {importlib.metadata.version('testbed')}" + (f" (commit {commit})" if commit else "")


def _print_sweep_outcome(run) -> None:
    from testbed.claims.sweeps import read_sweep_claims

    summary = run.read_summary()
    print(f"sweep: {summary['completed']} variants completed, {summary['failed']} failed")
    for slug, result in summary["variants"].items():
        if result["status"] == "failed":
            print(f"  failed {slug}: {result['error']}")
    for claim in read_sweep_claims(run.path):
        print(f"claim {claim['id']}: {claim['verdict']}")


def cmd_reproduce(args: argparse.Namespace) -> int:
    from testbed.claims.reproduce import check_results, repository_root, reproduce

    root = repository_root()
    if args.parallel is not None and args.parallel < 1:
        raise UserError(f"--parallel: {args.parallel}: at least 1")
    if args.sample is not None and (not args.check or args.sample < 1):
        raise UserError(f"--sample: {args.sample}: " + ("at least 1" if args.check else "only with --check"))
    if args.check and args.docs_only:
        raise UserError("--check: runs no sweep and writes no docs; leave out --docs-only")
    if args.check and args.rerun:
        raise UserError("--rerun: re-runs whole what --check would sample; use one of them")
    if args.rerun and not args.papers:  # every file whole is days of CPU: never by default
        raise UserError("--rerun: name the papers or scenarios to re-run whole (testbed reproduce --check lists the "
                        "stale result files)")
    if args.rerun:
        from testbed.claims.rerun import RerunInterrupted, rerun_results

        try:
            lines = rerun_results(root, args.papers, args.size, args.runs_dir, not args.docs_only, args.quiet,
                                  args.parallel, args.allow_dirty)
        except RerunInterrupted as err:
            print("\n".join(err.lines))
            print(f"interrupted: '{err.command}' continues from what was kept", file=sys.stderr)
            return 130
    elif args.check:
        lines = check_results(root, args.papers, args.size, args.runs_dir, args.sample, args.quiet, args.parallel,
                              args.allow_dirty)
    else:
        lines = reproduce(root, args.papers, args.size, args.runs_dir, not args.docs_only, args.quiet, args.parallel,
                          args.allow_dirty)
    for line in lines:
        print(line)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from testbed.loading import load_raw, load_scenario, validate_raw
    from testbed.sweep import expand_variants
    from testbed.validation import preflight

    for file in args.files:
        if args.no_sweep:
            scenario = validate_raw(_without_sweep(load_raw(file, args.overrides)), file, args.overrides)
        else:
            scenario = load_scenario(file, args.overrides)
        if scenario.sweep is not None:
            from testbed.sweep_shared import check

            check(scenario, file)  # before preflight, which asks a cluster
        preflight(scenario, file)
        if scenario.sweep is not None:
            variants = expand_variants(load_raw(file, args.overrides), file)
            if scenario.claims is not None:
                from testbed.claims.evaluate import check_claims

                check_claims(scenario.claims, variants, file)
            print(f"{file}: ok ({len(variants)} variants)")
        else:
            print(f"{file}: ok{_model_note(scenario)}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from testbed.execute import resume_run
    from testbed.loading import validate_raw
    from testbed.run import RunFolder
    from testbed.sweep import run_sweep

    folder = RunFolder.open(args.run_dir)
    raw = folder.read_config()
    if raw.get("sweep"):
        run = run_sweep(raw, validate_raw(raw, str(folder.config_path)), str(folder.config_path), folder.path,
                        args.quiet, reports=args.report)
        _print_sweep_outcome(run)
    else:
        run = resume_run(args.run_dir, args.quiet, args.verbose, args.report)
    _print_report_line(run, args.report)
    return 0


def _print_report_line(run: RunFolder, report: bool) -> None:
    print(f"report: {run.report_dir / 'index.html'}" if report else
          f"run folder: {run.path} (no report: `testbed report {run.path}` renders it)")


def cmd_report(args: argparse.Namespace) -> int:
    from testbed.execute import report_run
    from testbed.report.sweep import render_sweep_report
    from testbed.run import RunFolder

    folder = RunFolder.open(args.run_dir)
    render = render_sweep_report if folder.read_config().get("sweep") else report_run
    print(f"report: {render(folder)}")
    if args.audit:
        return _audit_page(folder)
    return 0


def _audit_page(folder: RunFolder) -> int:
    """``testbed report --audit``: the auditor's page, its verdict and rows also on stdout."""
    from testbed import kinds
    from testbed.report.audit_page import render_audit_page, verdict_line
    from testbed.report.render import RunData

    config = folder.read_config()
    if config.get("sweep") or config.get("kind") not in kinds.RUNNERS:
        raise UserError(f"{folder.path}: --audit reads one run, not a sweep: give one of its variants' folders")
    data = RunData.load(folder)
    findings = kinds.runner(config["kind"]).audit_findings(data)
    print(f"audit: {render_audit_page(folder, findings)}")
    print(verdict_line(findings))
    for finding in findings:
        print(f"  [{finding.status}] {finding.area}: {finding.measured}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from datetime import datetime

    from testbed.report.compare import compare_runs

    out = args.out or Path("runs") / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    print(f"comparison: {compare_runs(args.run_dirs, args.metric, out)}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from testbed.cluster.local import run_command

    return run_command(args.action, args.nodes, args.cpus_per_node, args.head_cpus)


def cmd_list(args: argparse.Namespace) -> int:
    for name, summary in _listing(args.what):
        print(f"{name:28s} {summary}".rstrip())
    return 0


def _listing(what: str) -> list[tuple[str, str]]:
    if what == "scenarios":
        # The checkout the user works in, not the installed copy's (an editable install of another
        # checkout would list that one's files); the installed copy only where there is none here.
        folder = Path("scenarios") if Path("scenarios").is_dir() else REPO_SCENARIOS
        return [(_display_path(f), _scenario_title(f)) for f in sorted(folder.resolve().rglob("*.yaml"))]
    if what == "workloads":
        from testbed.workloads import registry

        return [(name, registry.summary(name)) for name in sorted(registry.workload_names())]
    return [(name, _first_line(entry)) for name, entry in sorted(REGISTRIES[what]().items())]


def _strategies() -> dict:
    from testbed.federated.strategies import registered_strategies

    return registered_strategies()


def _attacks() -> dict:
    from testbed.federated.attacks import registered_attacks

    return registered_attacks()


def _papers() -> dict:
    from testbed.claims.papers import PAPERS

    return {paper: f"{entry.title}: {', '.join(entry.scenarios)}" for paper, entry in PAPERS.items()}


def _datasets() -> dict:
    from testbed.data.sources import describe_options, registered_sources

    return {name: f"{cls.summary}" + (f"; options: {describe_options(cls)}" if cls.Config.model_fields else "")
            for name, cls in registered_sources().items()}


def _model_note(scenario) -> str:
    """The parameter count of the workload's own model (``workload.model``), which validation built."""
    if scenario.workload is None or "model" not in scenario.workload.params:
        return ""
    from testbed.workloads.usermodel import describe

    return describe(scenario.workload.params, scenario.data)


def _trackers() -> dict:
    from testbed.trackers import registered_trackers

    return registered_trackers()


def _topologies() -> dict:
    from testbed.decentralized.graphs import registered_topologies

    return registered_topologies()


def _engines() -> dict:
    from testbed.engines.config import registered_engines

    # What each engine offers with its default settings (``local`` with use_ray: never offers less).
    engines = registered_engines()
    offers = {name: ", ".join(sorted(cls.model_construct(type=name).capabilities())) for name, cls in engines.items()}
    return {name: f"{_first_line(cls).rstrip('.')}; offers: {offers[name]}" for name, cls in engines.items()}


def _partitioners() -> dict:
    from testbed.data.partition import registered_partitioners

    return registered_partitioners()


REGISTRIES: dict[str, Callable[[], dict]] = {"strategies": _strategies, "attacks": _attacks, "topologies": _topologies,
                                             "datasets": _datasets, "trackers": _trackers, "engines": _engines,
                                             "partitioners": _partitioners, "papers": _papers}


def _display_path(path: Path) -> str:
    cwd = Path.cwd()
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)


def _scenario_title(path: Path) -> str:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return "(invalid YAML)"
    return f"[{data.get('kind', '?')}] {data.get('description', '')}" if isinstance(data, dict) else ""


def _first_line(entry: object) -> str:
    if isinstance(entry, str):
        return entry
    described = getattr(entry, "fn", entry)  # an attack is described by its function
    text = getattr(entry, "summary", "") or (getattr(described, "__doc__", "") or "")
    return text.strip().splitlines()[0] if text.strip() else ""


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run, "validate": cmd_validate, "resume": cmd_resume, "report": cmd_report, "list": cmd_list,
    "cluster": cmd_cluster, "reproduce": cmd_reproduce, "compare": cmd_compare,
}


def _name_native_crashes() -> None:
    """A crash in native code (torch, Ray, gloo) kills the process without a Python traceback: print
    every thread's Python stack on stderr first, so that the crash names its line. Left alone where a
    host (pytest) already does it, or where stderr is not a file."""
    if not faulthandler.is_enabled():
        with contextlib.suppress(ValueError, OSError):
            faulthandler.enable()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``testbed`` console script."""
    _name_native_crashes()
    args = _parser().parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not in the interpreter's exit
        return code
    except ResumableFailure as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 3
    except UserError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except KeyboardInterrupt as err:
        where = err.run_dir if isinstance(err, RunInterrupted) else "RUN_DIR"
        print(f"interrupted: 'testbed resume {where}' continues from the last checkpoint", file=sys.stderr)
        return 130
    except Exception:  # a bug in the testbed, not the user's fault: show everything
        traceback.print_exc()
        print("internal error: please report it with the traceback above", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    # The reader went away (`testbed list | head`): what is left to print has nowhere to go, and
    # the interpreter's own flush at exit would fail again, so point stdout at /dev/null.
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
