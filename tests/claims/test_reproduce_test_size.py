"""`testbed reproduce --size test` evaluates every statement of every paper (its verdicts mean nothing
at this size), renders no report on the way, and rewriting the docs from its result files changes no
byte. One test per paper, so that a failure names its paper; the papers of one kind run one after
another on one pytest-xdist worker (tests/conftest.py, `xdist_scope`), in its process, and share the
warm server their variants are forked from, kept while this file's tests run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.claims.docs import BEGIN, END, splice
from testbed.claims.papers import PAPERS
from testbed.claims.reproduce import load, repository_root, reproduce
from testbed.engines.warm import servers_kept

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def warm_servers() -> Iterator[None]:
    """One warm server per kind for the papers this worker runs in a row, not one per paper (each
    starts in 5-7 s of imports); stopped when the worker leaves this file."""
    with servers_kept():
        yield


def _files(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("paper", list(PAPERS))
def test_every_claim_of_the_paper_evaluates_at_the_test_size(paper, tmp_path, cli, warm_servers, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.chdir(ROOT)  # the checkout whose scenarios reproduce reads, wherever pytest started
    code, out, err = cli("reproduce", paper, "--size", "test", "--runs-dir", runs, "--quiet")

    assert code == 0, err[-3000:]
    expected = {f"{paper}: {statement.id}" for path in PAPERS[paper].scenarios
                for statement in load(ROOT, path, "test").claims.statements}
    lines = out.splitlines()
    assert expected <= {": ".join(line.split(": ")[:2]) for line in lines}
    # Every statement was called on two paired seeds: none is left pending for want of a run.
    assert not [line for line in lines if ": pending" in line]
    # Nobody reads a report at this size: neither a variant nor a sweep renders one.
    assert not list((runs / "test").rglob("report"))

    # --docs-only (run=False) rewrites the same pages from the result files, and says the same.
    docs, results = _files(runs / "docs"), _files(runs / "results")
    again = reproduce(ROOT, [paper], "test", runs, run=False, quiet=True)
    assert again == lines
    assert _files(runs / "docs") == docs and _files(runs / "results") == results
    assert not (ROOT / "docs" / "reproduction" / "results" / "test").exists()


def test_reproduce_finds_the_checkout():
    assert repository_root() == ROOT


def test_a_paper_page_written_afresh_is_spliced_again_without_a_changed_byte():
    # The test size writes each paper's page from its title alone; --docs-only splices into that page.
    block = f"{BEGIN}\n\n| claim |\n|---|\n\n{END}\n"
    for body in ("", "Hand-written analysis.\n"):
        once = splice(f"# Paper\n{body}", block)
        assert once == f"# Paper\n\n{block}" + (f"\n{body}" if body else "")
        assert splice(once, block) == once
