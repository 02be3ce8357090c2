"""Shared fixtures (tiny scenario files, an in-process CLI runner) and the suite's tiers.

Every test gets one tier marker at collection (`make check` runs `-m "unit and not slow"`):
``cluster`` for tests/cluster (emulated clusters), ``integration`` for the tests that start Ray, a
Flower simulation, DeepSpeed or a child process (marked ``@pytest.mark.integration`` where they are
written, or using a fixture listed below), and ``unit`` for all others. ``@pytest.mark.slow`` marks,
beside its tier, a test of tens of seconds even at its smallest size. The rule is checked, not trusted: while a
``unit`` test sets up or runs, starting a process, ``ray.init`` or a Flower simulation raises
`TierViolation`, so a test that does more than its tier allows fails loudly instead of slowing
``make check`` down.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing.process
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import main
from testbed.engines.warm import WarmServer
from testbed.scenario import KIND_BLOCKS

# Progress bars off and no accidental cluster from the environment.
os.environ.setdefault("CI", "1")

TINY_SCENARIO: dict[str, Any] = {
    "name": "tiny",
    "kind": "workload",
    "seed": 3,
    "engine": {"type": "local"},
    "data": {"dataset": "digits", "test_fraction": 0.25},
    "workload": {"name": "classifier", "arch": "cnn", "hidden": 16, "batch_size": 32},
    "training": {"steps": 24, "eval_every": 4, "checkpoint_every": 10},
}


@pytest.fixture(autouse=True, scope="session")
def own_cache_folder(tmp_path_factory):
    """The suite's cache of prepared corpora (`testbed.pretrain.corpus_cache`) is a temporary folder,
    never the user's (the runs it starts, in this process or not, inherit the variable)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TESTBED_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture
def write_scenario(tmp_path: Path):
    """Write a scenario mapping (default: the tiny one, updated by ``changes``) to a YAML file."""

    def write(changes: dict | None = None, name: str = "scenario.yaml", text: str | None = None) -> Path:
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
            return path
        data = {**TINY_SCENARIO, **(changes or {})}
        # The tiny scenario's workload-kind blocks mean nothing to other kinds, which refuse them.
        kind = data.get("kind")
        for block in ("workload", "training"):
            if isinstance(kind, str) and block not in KIND_BLOCKS.get(kind, (block,)) and block not in (changes or {}):
                data.pop(block)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# `make test` and `make check` install every extra (`.[all]`) and set this: there a missing extra is a
# broken install, and its tests fail instead of skipping. A plain `pytest` on a base install skips them.
REQUIRE_EXTRAS_ENV = "TESTBED_REQUIRE_EXTRAS"


def require_extra(module: str, extra: str) -> Any:
    """The module of an optional extra; where it is absent, skip naming the extra (fail under `make test`)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        message = f"{module} is not installed: pip install 'testbed[{extra}]' ({error})"
        if os.environ.get(REQUIRE_EXTRAS_ENV):
            pytest.fail(f"{message}; `make test` installs every extra", pytrace=False)
        pytest.skip(message)


requires_chromium = pytest.mark.skipif(shutil.which("chromium") is None,
                                       reason="headless Chromium (Debian package 'chromium') is not installed")


# --- test tiers ----------------------------------------------------------------------------------

TESTS = Path(__file__).parent

# Fixtures that start such processes: every test using one (directly or through another) is integration.
INTEGRATION_FIXTURES = frozenset({
    "emulated_cluster",  # testbed cluster up (tests/cluster)
    "three_node_cluster",  # ray.cluster_utils.Cluster (tests/core/test_engines.py)
    "site",  # pip installs the example plugins (tests/core/test_extending.py)
    "runs",  # a sweep's variants run as processes (tests/core/test_compare.py)
})

# Child processes a unit test may start, each a query of milliseconds: the repository's commit for a
# run's provenance, the physical core count joblib (scikit-learn) reads once per process, and the font
# list matplotlib reads once per machine to build its font cache (on a fresh machine the first test to
# draw a plot does it; refused, no cache is written and every unit test that plots after it fails).
ALLOWED_COMMANDS = frozenset({"git", "lscpu", "fc-list"})


class TierViolation(AssertionError):
    """A test marked ``unit`` started Ray, a Flower simulation or a process: mark it ``integration``."""


def _tier(item: pytest.Item) -> str:
    if TESTS / "cluster" in Path(item.path).parents:
        return "cluster"
    if item.get_closest_marker("integration") or INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "integration"
    return "unit"


# How `make test` spreads the suite over two pytest-xdist workers (``-n 2 --dist loadscope``, whose
# scheduler `pytest_xdist_make_scheduler` replaces): by test file, so that a module-scoped fixture
# (a Flower run several tests read) starts once; the cluster tier and the files that emulate a cluster
# as one scope, one test at a time (a `ray start` head and the network namespaces are machine-wide);
# the every-claim test (one test per paper) by the kind of the paper's scenarios, so that the papers of
# one kind run one after another on one worker and share its warm server (the test file keeps it for
# them: 5-7 s of imports each) while the kinds spread over both workers. The scheduler sees node ids
# only, so these are paths; `pytest_collection_modifyitems` checks that every test using a
# machine-wide fixture is in a cluster-scoped file. (pytest-xdist's own ``xdist_group`` marks cannot
# do it: xdist 3.8 renames ``item._nodeid``, which pytest 9 no longer reads.)
MACHINE_WIDE_FIXTURES = frozenset({"emulated_cluster", "three_node_cluster"})
CLUSTER_SCOPED = ("tests/cluster/", "tests/core/test_engines.py")
BY_PAPER_KIND = "tests/claims/test_reproduce_test_size.py"


def xdist_scope(nodeid: str) -> str:
    """The scope of a test: the tests of one scope run one after another on one worker."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(CLUSTER_SCOPED):
        return "cluster"
    if path == BY_PAPER_KIND and nodeid.endswith("]"):
        return f"{path}::{paper_kind(nodeid.rsplit('[', 1)[1][:-1])}"
    return path


def paper_kind(paper: str) -> str:
    """The kind of a paper's scenarios, from their folder under scenarios/ (a paper's share one)."""
    from testbed.claims.papers import PAPERS

    return PAPERS[paper].scenarios[0].split("/")[0] if paper in PAPERS else paper


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    # Scopes start in collection order: tests/claims (the SDEA claims, 7 minutes of Flower runs) and
    # tests/cluster (the serial cluster tier, as long) first. xdist's default starts the scopes with
    # the most tests first, which put the one-test SDEA scope last and made it the suite's tail.
    config.option.loadscopereorder = False

    class SuiteScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return SuiteScopes(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item)
        if not item.get_closest_marker(tier):
            item.add_marker(tier)
        if MACHINE_WIDE_FIXTURES & set(getattr(item, "fixturenames", ())) and xdist_scope(item.nodeid) != "cluster":
            raise pytest.UsageError(f"{item.nodeid} uses a machine-wide fixture: add its file to CLUSTER_SCOPED "
                                    "in tests/conftest.py, so that two workers never start one at once")


def _refuse(what: str, seen: list[str]):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        seen.append(what)
        raise TierViolation(f"a unit test may not start {what}: mark it @pytest.mark.integration")
    return refuse


def _guarded_execute_child(original, seen: list[str]):
    def execute_child(self, args, *rest: Any, **kwargs: Any) -> Any:
        command = [args] if isinstance(args, str | bytes) else list(args)
        if Path(str(command[0]).split()[0]).name not in ALLOWED_COMMANDS:
            return _refuse(f"a process ({command[0]!s})", seen)()
        return original(self, args, *rest, **kwargs)
    return execute_child


@contextlib.contextmanager
def _unit_guard(item: pytest.Item) -> Iterator[None]:
    """Starting a process (subprocess or multiprocessing), Ray or a Flower simulation raises; and fails the
    test even where the code under test catches the error (a run reports it and exits 1, Flower ends its
    simulation), so a mis-tiered test cannot pass or fail for another reason."""
    import ray  # a base dependency; imported once per session (under a second)

    seen: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        # Popen's one private door to the operating system: subprocess.run, check_output and every library's
        # Popen pass through it (typeshed does not declare it).
        original = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        patch.setattr(subprocess.Popen, "_execute_child", _guarded_execute_child(original, seen))
        patch.setattr(multiprocessing.process.BaseProcess, "start", _refuse("a multiprocessing process", seen))
        patch.setattr(ray, "init", _refuse("Ray", seen))
        # A child forked from a warm server that an earlier test started passes no Popen (a sweep's
        # variants, `tests.processes`).
        patch.setattr(WarmServer, "start", _refuse("a process forked from a warm server", seen))
        # A Flower simulation starts Ray, which the line above refuses; where Flower's simulation module
        # is already imported its entry point is refused by name too (importing it costs seconds).
        if "flwr.simulation" in sys.modules:
            patch.setattr(sys.modules["flwr.simulation"], "run_simulation", _refuse("a Flower simulation", seen))
        try:
            yield
        finally:
            if seen:
                raise TierViolation(f"{item.nodeid} is marked unit but started {seen[0]}: "
                                    "mark it @pytest.mark.integration")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    # Setup as well as the call: a module- or session-scoped fixture starts its processes here.
    with _unit_guard(item) if item.get_closest_marker("unit") else contextlib.nullcontext():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _unit_guard(item) if item.get_closest_marker("unit") else contextlib.nullcontext():
        return (yield)
