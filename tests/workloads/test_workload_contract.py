"""The contract every registered workload keeps, checked over the registry instead of copied per workload.

Each workload, at the tiny size its own tests use: resumes bit-exactly (every variant whose state
differs), gives identical final metrics on a second run, refuses a bad config with one line naming
the file and the field (exit 2, no run folder), and renders its report. A workload registered
without a tiny size here fails `test_every_registered_workload_has_a_tiny_size`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from testbed.loading import validate_raw
from testbed.workloads.registry import workload_names
from testbed.workloads.runner import build_workload
from tests.core.test_bad_input_corpus import _assert_one_line_naming
from tests.workloads.helpers import resumed_and_uninterrupted


@dataclass(frozen=True)
class Tiny:
    """A workload's tiny size: its config, its data, the steps of a resume split (and of a whole run),
    the variants whose resumed state differs, one bad value its config refuses, and, where a resume
    would not reach the state that matters at this size, a check that it did."""

    config: dict[str, Any]
    split_at: int
    total: int
    bad: tuple[str, Any]
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"default": {}})
    data: dict[str, Any] = field(default_factory=lambda: {"dataset": "digits"})
    reached: Callable[[Any, str], bool] = lambda workload, variant: True


ATRADIFF = dict(offline_episodes=6, lengths=[8, 16], hidden=32, blocks=1, pretrain_steps=3, diffusion_steps=20,
                sample_steps=3, generate_every=10, generate_count=4, adapt_every=15, adapt_steps=2, warmup_steps=5,
                batch_size=16, sac_hidden=16, eval_episodes=1)
AUDIO = dict(train_clips=64, hidden=16, heads=2, batch_size=16)

TINY: dict[str, Tiny] = {
    "classifier": Tiny(dict(arch="cnn", hidden=16, batch_size=32), 4, 10, ("hidden", "big")),
    "bisam": Tiny(dict(label_noise=0.2, hidden=32), 12, 30, ("rho", -0.1),
                  variants={"bisam": dict(variant="bisam"), "sam": dict(variant="sam")}),
    "aco": Tiny(dict(eval_instances=20, hidden=32, num_samples=400), 15, 40, ("cost", -0.1)),
    "strwae": Tiny(dict(hidden=32, batch_size=32, labelled_batch_size=8), 5, 12, ("style_dim", 0),
                   variants={v: dict(variant=v) for v in ("strwae", "wae", "vae_hsic")}),
    "vsdm": Tiny(dict(stage_steps=4, a_paths=32, a_steps=3, time_steps=20, hidden=32, eval_size=200), 6, 14,
                 ("variant", "sgm"), variants={v: dict(variant=v) for v in ("vsdm", "dsm")}),
    "dfm": Tiny(dict(hidden=32, eval_samples=50, sample_steps=4, train_size=300, batch_size=32), 4, 10,
                ("vocab", 1), variants={"dfm": dict(variant="dfm"), "d3pm": dict(variant="d3pm"),
                                        "codesign": dict(task="codesign")}),
    # 200 samples in batches of 32: the inverse-epoch weight changes at steps 7 and 13, after the split at 6.
    "dddm": Tiny(dict(guide_weight="inverse_epoch", train_size=200, batch_size=32, hidden=32, eval_samples=100,
                      sample_steps=[1, 2, 4]), 6, 14, ("metric_c", 0),
                 variants={"dddm-self": dict(variant="dddm", conditioning="self"),
                           "dddm-buffer": dict(variant="dddm", conditioning="buffer"),
                           "ddim-self": dict(variant="ddim", conditioning="self")}),
    "oodrobust": Tiny(dict(population=3, widths=[16], epsilons=[0.1], batch_size=32), 3, 6, ("population", 2)),
    "gpgvae": Tiny(dict(graphs_per_sign=3, pretrain_graphs=40, grad_samples=2, estimator="score"), 6, 12,
                   ("nodes", 2)),
    "stc": Tiny(dict(variant="stc", channels=4, batch_size=4, eval_size=8), 3, 6, ("frames_in", -1),
                data={"dataset": "moving_digits"}),
    "gridcoarsen": Tiny(dict(side=16, reductions=[10], record_steps=30, parabolic_time=0.05, wave_time=1.2,
                             lr=0.004), 2, 5, ("reductions", [1])),
    "floodgnn": Tiny(dict(region_size=8, events=3, heldout_events=1, train_combos=4, rollout_steps=6, horizons=[3, 6],
                          hidden=8), 2, 4, ("region_size", 500)),
    "musicflow": Tiny(dict(AUDIO, test_clips=16, sample_steps=2, fd_steps=[2]), 2, 6, ("infill_fraction", 1.5),
                      variants={v: dict(variant=v) for v in ("musicflow", "nomask", "single")}),
    "ppae": Tiny(dict(AUDIO, test_clips=8, sample_steps=4), 2, 6, ("inject_frac", 1.5),
                 variants={v: dict(variant=v) for v in ("ppae", "regenerate", "sdedit")}),
    "robodreamer": Tiny(dict(channels=8, embed=16, blocks=1, batch_size=8, eval_per_combo=1, sample_steps=4), 2, 5,
                        ("embed", 15), variants={"compositional": dict(variant="compositional", goal_image=True),
                                                 "monolithic": dict(variant="monolithic", goal_image=False)}),
    # Split at 17 and run to 33: past a generation (every 10 steps) and an adaptation (every 15) on each side.
    "atradiff": Tiny(ATRADIFF, 17, 33, ("gamma", 1.0), variants={v: dict(variant=v) for v in
                                                                  ("atradiff", "synther", "sac", "rlpd")},
                     reached=lambda workload, variant: variant == "sac" or workload.synthetic.size > 0),
}

RESUMES = [(name, variant) for name in workload_names() if name in TINY for variant in TINY[name].variants]


def scenario_mapping(name: str, variant: str = "default", /, **changes: Any) -> dict[str, Any]:
    tiny = TINY[name]
    workload = {"name": name, **tiny.config, **tiny.variants.get(variant, {}), **changes}
    return {"name": f"contract-{name}", "kind": "workload", "seed": 0, "data": tiny.data, "workload": workload,
            "training": {"steps": tiny.total, "eval_every": tiny.total, "checkpoint_every": tiny.total}}


def assert_same_state(mine: Any, theirs: Any, where: str = "state") -> None:
    """Equal to the bit: tensors and arrays element by element, containers key by key."""
    if isinstance(mine, torch.Tensor):
        assert torch.equal(mine, theirs), where
    elif isinstance(mine, np.ndarray):
        np.testing.assert_array_equal(mine, theirs, err_msg=where)
    elif isinstance(mine, dict):
        assert mine.keys() == theirs.keys(), where
        for key in mine:
            assert_same_state(mine[key], theirs[key], f"{where}.{key}")
    elif isinstance(mine, list | tuple):
        assert len(mine) == len(theirs), where
        for index, (a, b) in enumerate(zip(mine, theirs)):
            assert_same_state(a, b, f"{where}.{index}")
    else:
        assert mine == theirs or (mine != mine and theirs != theirs), where  # NaN equals NaN here


def test_every_registered_workload_has_a_tiny_size():
    assert set(workload_names()) <= set(TINY), "give each registered workload its tiny size in TINY"


@pytest.mark.parametrize("name, variant", RESUMES, ids=[f"{n}-{v}" for n, v in RESUMES])
def test_resume_continues_bit_exactly(name, variant):
    tiny = TINY[name]
    scenario = validate_raw(scenario_mapping(name, variant), "s.yaml")
    restored, straight = resumed_and_uninterrupted(lambda: build_workload(scenario), tiny.split_at, tiny.total)
    assert tiny.reached(restored, variant)
    assert_same_state(restored.state_dict(), straight.state_dict())
    assert restored.evaluate() == straight.evaluate()
    assert restored.train(1) == straight.train(1)


def _run(cli, tmp_path: Path, name: str, run: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_mapping(name), sort_keys=False))
    code, _, err = cli("run", path, "--run-dir", tmp_path / run, "--quiet")
    assert code == 0, err
    return tmp_path / run


@pytest.mark.slow
@pytest.mark.parametrize("name", workload_names())
def test_second_run_gives_identical_metrics_and_the_report_renders_again(cli, tmp_path, name):
    first, second = _run(cli, tmp_path, name, "first"), _run(cli, tmp_path, name, "second")
    metrics = [json.loads((run / "summary.json").read_text())["final_metrics"] for run in (first, second)]
    assert metrics[0] and metrics[0] == metrics[1]

    page = first / "report" / "index.html"
    page.unlink()
    code, out, err = cli("report", first)
    assert code == 0, err
    assert str(page) in out and page.stat().st_size > 0
    html = page.read_text()
    images = [p for p in (first / "report").iterdir() if p.suffix in (".png", ".svg")]
    assert images and all(image.name in html for image in images)  # the workload's plots, each on the page


@pytest.mark.parametrize("name", workload_names())
def test_bad_config_is_refused_in_one_line_naming_the_field(cli, tmp_path, name):
    field_name, value = TINY[name].bad
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_mapping(name, **{field_name: value}), sort_keys=False))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run")
    assert code == 2
    _assert_one_line_naming(err, path, [], (f"workload.{field_name}",))
    assert not (tmp_path / "run").exists()
