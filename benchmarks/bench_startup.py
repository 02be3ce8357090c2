"""Start-up cost of the CLI: whole-process wall time and peak memory, and what the imports cost.

Each command runs ``--repeat`` times in a fresh interpreter; the median wall time and the peak
resident memory (of the process and its children) are printed beside the yardstick measured in
the same run, a bare ``python -c pass``, and against the targets of docs/architecture.md
(validate and list <= 1.5 s, validate <= 150 MB). ``--importtime`` adds the ten most expensive
imports of ``testbed validate`` from ``python -X importtime``.

Then ``testbed validate`` of every bundled scenario (each YAML under ``scenarios/``; a sweep
validates all its variants), against issue 39's target of <= 1.5 s and <= 200 MB for each, with
the load average before and after (numbers taken under load are labelled so). ``--only`` keeps the
scenarios whose path holds a word; ``--no-scenarios`` skips them. The first validation of a
federated or decentralized scenario on a machine fills the label cache (`testbed.data.metadata`):
a warm-up run per scenario, not timed, comes first. Not a test::

    python benchmarks/bench_startup.py [--repeat 3] [--importtime] [--only federated] [--no-scenarios]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass (yardstick)": [sys.executable, "-c", "pass"],
    "testbed --help": [sys.executable, "-m", "testbed.cli", "--help"],
    "testbed validate scenarios/quickstart.yaml": [sys.executable, "-m", "testbed.cli", "validate",
                                                   str(REPO / "scenarios" / "quickstart.yaml")],
    "testbed list workloads": [sys.executable, "-m", "testbed.cli", "list", "workloads"],
}
TARGETS = {"testbed validate scenarios/quickstart.yaml": (1.5, 150.0), "testbed list workloads": (1.5, None)}
SCENARIO_TARGET = (1.5, 200.0)  # issue 39: validate any bundled scenario in <= 1.5 s and <= 200 MB


def measure(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one run of ``command`` in a fresh child process."""
    import os

    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # a fresh child per run, so RUSAGE_CHILDREN's peak is this command's alone
        os.close(read)
        done = subprocess.run(command, capture_output=True)
        os.write(write, f"{done.returncode} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}".encode())
        os._exit(0)
    os.close(write)
    _, _ = os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    code, peak_kb = os.read(read, 100).decode().split()
    os.close(read)
    if code != "0":
        raise RuntimeError(f"{' '.join(command)} exited with {code}")
    return wall, int(peak_kb) / 1024


def import_costs(top: int = 10) -> list[tuple[int, str]]:
    """The ``top`` largest cumulative import times (microseconds) of ``testbed validate``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "testbed.cli", "validate",
                           str(REPO / "scenarios" / "quickstart.yaml")], capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
            if not name.startswith(" "):
                rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:top]


def bundled_scenarios(only: str | None) -> list[Path]:
    """Every YAML under scenarios/ (whose path holds ``only``, if given), in path order."""
    paths = sorted(path.relative_to(REPO) for path in (REPO / "scenarios").rglob("*.yaml"))
    return [path for path in paths if only is None or only in str(path)]


def scenario_table(repeat: int, only: str | None) -> None:
    """Median wall time and peak RSS of ``testbed validate FILE`` per bundled scenario, with the verdict."""
    print(f"\nload average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'testbed validate':52s} {'median s':>9s} {'max s':>7s} {'peak MB':>8s}  <= {SCENARIO_TARGET[0]} s, "
          f"<= {SCENARIO_TARGET[1]:.0f} MB")
    missed = 0
    for path in bundled_scenarios(only):
        command = [sys.executable, "-m", "testbed.cli", "validate", str(REPO / path)]
        measure(command)  # warm-up: fills the label cache on a fresh machine (and the page cache)
        runs = [measure(command) for _ in range(repeat)]
        wall, peak = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
        ok = wall <= SCENARIO_TARGET[0] and peak <= SCENARIO_TARGET[1]
        missed += not ok
        print(f"{str(path):52s} {wall:9.2f} {max(r[0] for r in runs):7.2f} {peak:8.0f}  {'met' if ok else 'MISSED'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {missed} missed "
          "(a loaded machine's times are not the target's: re-measure idle)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument("--only", help="validate only the bundled scenarios whose path holds this")
    parser.add_argument("--no-scenarios", action="store_true", help="skip the bundled scenarios")
    args = parser.parse_args()
    yardstick = None
    print(f"{'command':46s} {'median s':>9s} {'peak MB':>8s} {'x python':>9s}  target")
    for label, command in COMMANDS.items():
        runs = [measure(command) for _ in range(args.repeat)]
        wall, peak = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
        yardstick = yardstick or wall
        target = TARGETS.get(label)
        verdict = ""
        if target:
            ok = wall <= target[0] and (target[1] is None or peak <= target[1])
            verdict = f"<= {target[0]} s" + (f", <= {target[1]:.0f} MB" if target[1] else "") + \
                      (": met" if ok else ": MISSED")
        print(f"{label:46s} {wall:9.2f} {peak:8.0f} {wall / yardstick:9.1f}  {verdict}")
    if args.importtime:
        print("\nlargest cumulative imports of testbed validate (ms):")
        for cumulative, name in import_costs():
            print(f"  {cumulative / 1000:8.1f}  {name}")
    if not args.no_scenarios:
        scenario_table(args.repeat, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
