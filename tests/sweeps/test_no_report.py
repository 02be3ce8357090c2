"""``--no-report``: a run or a sweep renders no report (reproduce's test size skips the plotting this
way), gives the same numbers, and ``testbed report`` renders the report later."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import TINY_SCENARIO

SMALL = {**TINY_SCENARIO, "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
         "training": {"steps": 4, "eval_every": 2, "checkpoint_every": 2}}


def _final(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())["final_metrics"]


def test_a_run_without_its_report_gives_the_same_numbers_and_renders_it_later(cli, write_scenario, tmp_path):
    path = write_scenario(SMALL)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "with", "--quiet")
    assert code == 0, err
    code, out, err = cli("run", path, "--run-dir", tmp_path / "without", "--quiet", "--no-report")
    assert code == 0, err

    assert not (tmp_path / "without" / "report").exists()
    assert f"no report: `testbed report {tmp_path / 'without'}`" in out
    assert _final(tmp_path / "without") == _final(tmp_path / "with")
    code, out, err = cli("report", tmp_path / "without")
    assert code == 0, err
    assert (tmp_path / "without" / "report" / "index.html").read_bytes().startswith(b"<!doctype html>")


@pytest.mark.integration
def test_a_sweep_without_reports_renders_neither_the_variants_nor_its_own(write_scenario, tmp_path):
    path = write_scenario({**SMALL, "sweep": {"grid": {"seed": [1, 2]}, "parallel": 2}})
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--run-dir", str(tmp_path / "sweep"),
                           "--quiet", "--no-report"], env={**os.environ, "CI": "1"}, capture_output=True, text=True,
                          timeout=600)

    assert done.returncode == 0, done.stderr
    variants = json.loads((tmp_path / "sweep" / "summary.json").read_text())["variants"]
    assert [r["status"] for r in variants.values()] == ["completed", "completed"]
    assert all((tmp_path / "sweep" / "variants" / slug / "summary.json").is_file() for slug in variants)
    assert not list((tmp_path / "sweep").rglob("report"))
