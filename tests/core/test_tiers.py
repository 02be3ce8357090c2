"""The test tiers of tests/conftest.py: each test gets one tier, and a unit test that starts Ray, a Flower
simulation or a process fails, even where the code under test catches the refusal."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from tests.conftest import TierViolation, _unit_guard, xdist_scope


def test_this_test_is_unit_only(request):
    assert [m.name for m in request.node.iter_markers() if m.name in ("unit", "integration", "cluster")] == ["unit"]


def test_a_refusal_the_code_under_test_swallows_still_fails_the_test(request):
    with pytest.raises(TierViolation, match="is marked unit but started a process"):
        with _unit_guard(request.node):
            try:  # as a run does: it reports the error and exits 1
                subprocess.run([sys.executable, "-c", "pass"], check=True)
            except Exception:
                pass


@pytest.mark.parametrize("start", [
    lambda: multiprocessing.get_context("spawn").Process(target=print).start(),
    lambda: __import__("ray").init(num_cpus=1),
], ids=["multiprocessing", "ray"])
def test_multiprocessing_and_ray_are_refused(request, start):
    with pytest.raises(TierViolation), _unit_guard(request.node):
        start()


def test_git_stays_allowed_for_a_runs_provenance(request):
    with _unit_guard(request.node):
        done = subprocess.run(["git", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "git" in done.stdout


def test_the_cluster_folder_the_marker_and_the_listed_fixtures_make_their_tests_non_unit(request):
    from tests.conftest import _tier

    class Item:  # what `_tier` reads
        def __init__(self, path, fixturenames=(), markers=()):
            self.path, self.fixturenames, self.name, self.markers = path, fixturenames, "test_x", markers

        def get_closest_marker(self, name):
            return name if name in self.markers else None

    tests = request.config.rootpath / "tests"
    assert _tier(Item(tests / "cluster" / "test_cluster.py")) == "cluster"
    assert _tier(Item(tests / "core" / "test_engines.py", ["three_node_cluster"])) == "integration"
    assert _tier(Item(tests / "core" / "test_units.py", ["tmp_path"])) == "unit"
    assert _tier(Item(tests / "core" / "test_units.py", ["tmp_path"], ["integration"])) == "integration"


def test_the_every_claim_test_goes_to_the_workers_kind_by_kind():
    # The workload papers in one scope share one warm server; the kinds still spread over both workers.
    claims = "tests/claims/test_reproduce_test_size.py"
    every = f"{claims}::test_every_claim_of_the_paper_evaluates_at_the_test_size"
    assert xdist_scope(f"{every}[aco]") == xdist_scope(f"{every}[atradiff]") == f"{claims}::workloads"
    assert xdist_scope(f"{every}[packing]") == xdist_scope(f"{every}[outeffhop]") == f"{claims}::pretrain"
    assert xdist_scope(f"{every}[sdea]") == f"{claims}::federated"
    assert xdist_scope(f"{claims}::test_reproduce_finds_the_checkout") == claims
    assert xdist_scope("tests/cluster/test_cluster.py::t") == xdist_scope("tests/core/test_engines.py::t") == "cluster"
