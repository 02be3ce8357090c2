"""The process of one slot of a sweep with ``sweep.processes: shared`` (`testbed.sweep_shared`):
``python -m testbed.sweep_slot [--no-report] FOLDER...`` runs the variant folders one after
another with the CLI's own ``run`` and ``resume`` in this process, on one engine started for them
and with what the kind keeps across runs (`Runner.kept_across_runs`). Each variant's outcome is in
its folder, or in the failure marker beside it (`testbed.sweep_status.failure_marker`) that this
process writes with the last line the failed run printed on stderr."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from testbed.run import RunFolder, atomic_write
from testbed.scenario import Scenario
from testbed.sweep_shared import NO_REPORT


def main(argv: Sequence[str]) -> int:
    """Run the variant folders of ``argv`` one after another; 130 once interrupted, else 0 (each
    variant's own outcome is in its folder, or in its failure marker)."""
    report = NO_REPORT not in argv
    engine: str | None = None  # the engine settings the slot's Ray was started with
    try:
        with contextlib.ExitStack() as kept:
            for folder in (Path(arg) for arg in argv if arg != NO_REPORT):
                scenario = _scenario_of(folder)
                if scenario.engine.model_dump_json() != engine:  # a sweep over engine settings: start it again
                    kept.close()
                    kept.enter_context(_kept(scenario))
                    engine = scenario.engine.model_dump_json()
                if _run_one(folder, report) == 130:
                    return 130
    except KeyboardInterrupt:  # between two variants
        return 130
    return 0


def _scenario_of(folder: Path) -> Scenario:
    """A variant's scenario, from its run folder or, before its run starts, its file."""
    from testbed.loading import load_scenario

    config = RunFolder(folder).config_path
    return load_scenario(config if config.is_file() else folder.with_name(folder.name + ".yaml"))


@contextlib.contextmanager
def _kept(scenario: Scenario) -> Iterator[None]:
    """The slot's engine started (a run's engine then finds its Ray running and leaves it), and what
    the kind keeps across runs; both stopped at the end."""
    from testbed import kinds
    from testbed.engines.registry import make_engine

    runner = kinds.runner(scenario.kind)
    engine = make_engine(scenario.engine, runner.needs_one_of, runner.parallel_tasks(scenario), quiet=True)
    engine.start()
    try:
        with runner.kept_across_runs():
            yield
    finally:
        engine.shutdown()


def _run_one(folder: Path, report: bool) -> int:
    """One variant with the CLI in this process, as its own process would run it; its exit code."""
    from testbed.cli import main as cli
    from testbed.sweep_status import failure_marker

    run = RunFolder(folder)
    if run.completed:
        return 0
    if run.config_path.is_file():
        command = ["resume", str(folder)]
    else:
        command = ["run", str(folder.with_name(folder.name + ".yaml")), "--run-dir", str(folder)]
    stderr = _LastLine(sys.stderr)
    with contextlib.redirect_stderr(stderr):
        code = cli([*command, "--quiet", *([] if report else [NO_REPORT])])
    if code != 0:
        result: dict[str, Any] = {"status": "failed", "exit_code": code, "error": stderr.last or "no output"}
        atomic_write(failure_marker(folder), json.dumps(result).encode())
    return code


class _LastLine(io.TextIOBase):
    """A stream that passes what is written on to ``target`` and remembers the last line that was
    not empty: the error a failed variant's process would have ended its stderr with."""

    def __init__(self, target: Any):
        self.target, self.last = target, ""

    def write(self, text: str) -> int:
        self.target.write(text)
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self.last = lines[-1]
        return len(text)

    def flush(self) -> None:
        self.target.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
