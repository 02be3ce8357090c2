"""`testbed reproduce --size test` evaluates every statement of every paper (its verdicts mean nothing
at this size), and rewriting the docs from its result files changes no byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testbed.claims.papers import PAPERS
from testbed.claims.reproduce import load, repository_root

ROOT = Path(__file__).resolve().parents[2]


def _reproduce(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "reproduce", *map(str, args), "--quiet"],
                          cwd=ROOT, env={**os.environ, "CI": "1"}, capture_output=True, text=True, timeout=3600)


def test_every_claim_of_every_paper_evaluates_at_the_test_size(tmp_path):
    runs = tmp_path / "runs"
    done = _reproduce("--size", "test", "--runs-dir", runs)

    assert done.returncode == 0, done.stderr[-3000:]
    expected = {f"{paper}: {statement.id}" for paper, entry in PAPERS.items() for path in entry.scenarios
                for statement in load(ROOT, path, "test").claims.statements}
    printed = {": ".join(line.split(": ")[:2]) for line in done.stdout.splitlines()}
    assert expected <= printed
    # Every statement was called on two paired seeds: none is left pending for want of a run.
    assert not [line for line in done.stdout.splitlines() if ": pending" in line]

    index = (runs / "docs" / "reproduction.md").read_bytes()
    again = _reproduce("--size", "test", "--runs-dir", runs, "--docs-only")
    assert again.returncode == 0, again.stderr
    assert (runs / "docs" / "reproduction.md").read_bytes() == index
    assert not (ROOT / "docs" / "reproduction" / "results" / "test").exists()


def test_reproduce_finds_the_checkout():
    assert repository_root() == ROOT
