"""Shared fixtures: tiny scenario files and an in-process CLI runner."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import main
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


requires_chromium = pytest.mark.skipif(shutil.which("chromium") is None,
                                       reason="headless Chromium (Debian package 'chromium') is not installed")
