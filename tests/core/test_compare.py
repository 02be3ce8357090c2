"""`testbed compare`: runs and sweeps side by side, paired by seed, on a page a browser shows whole."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from testbed.claims.statistics import paired_interval
from testbed.cli import main
from tests.browser import assert_readable
from tests.conftest import TINY_SCENARIO, requires_chromium

SHORT = {"data": {"dataset": "digits", "test_fraction": 0.25},
         "workload": {"name": "classifier", "arch": "mlp", "hidden": 16, "batch_size": 32},
         "training": {"steps": 12, "eval_every": 4, "checkpoint_every": 12}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two arms on seeds 1 and 2: a sweep of the reference (lr 0.02) and two single runs of lr 0.3."""
    root = tmp_path_factory.mktemp("compare")
    scenario = root / "s.yaml"
    scenario.write_text(yaml.safe_dump({**TINY_SCENARIO, **SHORT, "name": "arms"}, sort_keys=False))
    folders = {"sweep": root / "slow", "fast1": root / "fast-1", "fast2": root / "fast-2"}
    assert main(["run", str(scenario), "--run-dir", str(folders["sweep"]), "--quiet", "--set", "workload.lr=0.02",
                 "--set", "sweep={grid: {seed: [1, 2]}, parallel: 2}"]) == 0
    for seed in (1, 2):
        assert main(["run", str(scenario), "--run-dir", str(folders[f"fast{seed}"]), "--quiet", "--no-sweep",
                     "--set", "workload.lr=0.3", "--set", f"seed={seed}"]) == 0
    return folders


def _final(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())["final_metrics"]


def test_compare_pairs_the_arms_by_seed_with_an_interval(runs, tmp_path, capsys):
    out = tmp_path / "page"
    assert main(["compare", str(runs["sweep"]), str(runs["fast1"]), str(runs["fast2"]), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"comparison: {out / 'index.html'}"

    result = json.loads((out / "compare.json").read_text())
    assert result["metric"] == "test_accuracy" and len(result["runs"]) == 4  # the sweep gave its two variants
    assert list(result["arms"]) == ["workload.lr=0.02", "workload.lr=0.3"]
    (pair,) = result["paired"]
    reference = {seed: _final(runs["sweep"] / "variants" / f"seed={seed}")["test_accuracy"] for seed in (1, 2)}
    margins = [_final(runs[f"fast{seed}"])["test_accuracy"] - reference[seed] for seed in (1, 2)]
    expected = paired_interval(margins, 0.95, "t")
    assert expected is not None and pair["seeds"] == [1, 2]
    assert pair["interval"]["mean"] == pytest.approx(np.mean(margins))
    assert [pair["interval"]["low"], pair["interval"]["high"]] == pytest.approx([expected.low, expected.high])
    page = (out / "index.html").read_text()
    assert "Paired differences in test_accuracy" in page and f"[{expected.low:.4g}, {expected.high:.4g}]" in page
    differences = page[page.index("Scenario differences"):]
    assert "<th>run</th><th>name</th><th>seed</th><th>workload.lr</th></tr>" in differences  # only these differ


@requires_chromium
def test_the_compare_page_shows_its_chart_in_the_first_screen_in_headless_chromium(runs, tmp_path):
    out = tmp_path / "page"
    assert main(["compare", str(runs["sweep"]), str(runs["fast1"]), str(runs["fast2"]), "--out", str(out)]) == 0

    page = assert_readable(out, first_screen="compare-test_accuracy.png", name="compare")
    assert page.sections[:2] == ["Curves (one colour per run)", "Paired differences in test_accuracy (shared seeds)"]
    assert {"compare-test_accuracy.png", "compare-test_loss.png"} <= {i["src"] for i in page.images}


def _other_kind(runs: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "federated-run"
    shutil.copytree(runs["fast1"], folder)
    config = yaml.safe_load((folder / "config.yaml").read_text())
    (folder / "config.yaml").write_text(yaml.safe_dump({**config, "kind": "federated"}))
    return folder


@pytest.mark.parametrize("problem", ["not-a-run", "other-kind", "unknown-metric", "out-not-a-page", "one-run"])
def test_a_bad_comparison_is_one_line_exit_2(runs, tmp_path, capsys, problem):
    args = [str(runs["fast1"]), str(runs["fast2"])]
    named, words = str(runs["fast1"]), ()
    if problem == "not-a-run":
        (tmp_path / "notes").mkdir()
        args, named, words = [*args, str(tmp_path / "notes")], str(tmp_path / "notes"), ("not a run folder",)
    elif problem == "other-kind":
        other = _other_kind(runs, tmp_path)
        args, named, words = [*args, str(other)], str(other), ("federated", "one kind")
    elif problem == "unknown-metric":
        args, named, words = [*args, "--metric", "f1"], "--metric", ("'f1'", "test_accuracy")
    elif problem == "out-not-a-page":
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "thesis.tex").write_text("keep me")
        args, named, words = [*args, "--out", str(tmp_path / "mine")], str(tmp_path / "mine"), ("--out",)
    else:
        args, words = args[:1], ("compare needs two or more",)

    code = main(["compare", *args, *([] if "--out" in args else ["--out", str(tmp_path / "page")])])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert all(word in lines[0] for word in (named, *words)), lines[0]
    assert not (tmp_path / "page").exists()
    assert problem != "out-not-a-page" or (tmp_path / "mine" / "thesis.tex").read_text() == "keep me"


@pytest.mark.parametrize("count", [3, 12, 25])
def test_every_run_on_a_compare_chart_gets_a_colour_of_its_own(count):
    from testbed.report.plots import distinct_colours

    assert len({tuple(colour) for colour in distinct_colours(count)}) == count
