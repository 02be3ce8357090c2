"""Sweeps: variants in parallel sub-run folders, failures isolated, reruns skip finished variants."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from testbed.faults import KILL_AFTER_RECORDS
from testbed.report.sweep import compared_metrics
from testbed.sweep import expand_variants, variant_slug
from tests.conftest import TINY_SCENARIO

SWEEP = {
    **TINY_SCENARIO,
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
    "training": {"steps": 8, "eval_every": 4, "checkpoint_every": 4},
    "sweep": {"grid": {"seed": [1, 2]}, "variants": [{"training.steps": 8}, {"training.steps": 16}], "parallel": 2},
}


def _testbed(*args, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "testbed.cli", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600)


def test_grid_and_variants_expand_to_their_product():
    variants = expand_variants(SWEEP, "s.yaml")
    assert sorted(variants) == sorted(variant_slug({"training.steps": s, "seed": seed})
                                      for s in (8, 16) for seed in (1, 2))
    assert {v["seed"] for v in variants.values()} == {1, 2}
    assert all("sweep" not in v for v in variants.values())


def test_grid_values_that_share_a_name_get_folders_told_apart_by_their_keys():
    from tests.federated.test_federated_runs import FEDERATED

    sweep = {**FEDERATED, "sweep": {"grid": {
        "federated.attack": [None, {"name": "lie", "fraction": 0.25},
                             {"name": "lie", "fraction": 0.25, "threat_model": "marsfl"}],
        "federated.strategy": [{"name": "fedmedian"}, {"name": "fedavg"}]}}}
    variants = expand_variants(sweep, "s.yaml")
    assert sorted(variants) == sorted(f"federated.attack={a},federated.strategy={s}"
                                      for a in ("None", "lie", "lie+threat_model=marsfl")
                                      for s in ("fedmedian", "fedavg"))
    assert variants["federated.attack=lie+threat_model=marsfl,federated.strategy=fedavg"][
        "federated"]["attack"]["threat_model"] == "marsfl"
    assert variants["federated.attack=None,federated.strategy=fedavg"]["federated"]["attack"] is None


def test_a_sweep_naming_one_value_twice_is_refused_not_silently_merged():
    import pytest

    from testbed.errors import ScenarioError

    with pytest.raises(ScenarioError, match="share the folder name"):
        expand_variants({**SWEEP, "sweep": {"grid": {"seed": [1, 1]}}}, "s.yaml")
    # Equal values spelt apart (1 and 1.0) are two positions of the axis, each with its own label.
    assert sorted(expand_variants({**SWEEP, "sweep": {"grid": {"workload.lr": [1, 1.0]}}}, "s.yaml")) == [
        "workload.lr=1", "workload.lr=1.0"]


def test_a_bad_variant_is_refused_before_anything_runs(cli, write_scenario, tmp_path):
    path = write_scenario({**SWEEP, "sweep": {"grid": {"training.steps": [8, -1]}}})
    code, _, err = cli("run", path, "--run-dir", tmp_path / "sweep", "--quiet")
    assert code == 2 and "sweep variant" in err and "training.steps" in err
    assert not (tmp_path / "sweep").exists()


def test_sweep_runs_variants_isolates_failures_and_reruns_only_unfinished(write_scenario, tmp_path):
    path = write_scenario(SWEEP)
    sweep_dir = tmp_path / "sweep"

    # Every variant process dies at its 3rd record: the 8-step variants (2 records) finish, the 16-step ones do not.
    first = _testbed("run", path, "--run-dir", sweep_dir, "--quiet", env_extra={KILL_AFTER_RECORDS: "3"})

    assert first.returncode == 0, first.stderr
    summary = json.loads((sweep_dir / "summary.json").read_text())
    statuses = {slug: r["status"] for slug, r in summary["variants"].items()}
    assert sorted(statuses.values()) == ["completed", "completed", "failed", "failed"]
    assert all(("steps=16" in slug) == (status == "failed") for slug, status in statuses.items())
    assert "2 variants completed, 2 failed" in first.stdout and "killed by signal 9" in first.stdout

    second = _testbed("run", path, "--run-dir", sweep_dir, "--quiet")

    assert second.returncode == 0, second.stderr
    results = json.loads((sweep_dir / "summary.json").read_text())["variants"]
    assert all(r["status"] == "completed" for r in results.values())
    assert {slug: r["skipped"] for slug, r in results.items()} == {slug: "steps=8" in slug for slug in results}
    page = (sweep_dir / "report" / "index.html").read_text()
    assert "Means over seeds" in page and "sweep-curves.png" in page



def test_no_sweep_runs_the_base_scenario_once(cli, write_scenario, tmp_path):
    path = write_scenario(SWEEP)
    code, out, err = cli("run", path, "--run-dir", tmp_path / "once", "--quiet", "--no-sweep")
    assert code == 0, err
    summary = json.loads((tmp_path / "once" / "summary.json").read_text())
    assert summary.get("kind") != "sweep" and not (tmp_path / "once" / "variants").exists()
    assert "sweep: null" in (tmp_path / "once" / "config.yaml").read_text()


def test_the_report_compares_chosen_headline_or_shared_workload_metrics():
    done = lambda **final: {"status": "completed", "final_metrics": final}
    workload = {"a": done(test_sw=0.1, test_kl=0.3, label="x"), "b": done(test_sw=0.2, other=1.0),
                "c": {"status": "failed"}}
    assert compared_metrics(workload, []) == ["test_sw"]
    assert compared_metrics(workload, ["test_kl"]) == ["test_kl"]
    classifier = {"a": done(test_accuracy=0.9, test_loss=0.3, train_s=1.0)}
    assert compared_metrics(classifier, []) == ["test_accuracy", "test_loss"]


def test_the_report_groups_seeds_of_a_grid_that_varies_a_list_valued_key():
    from testbed.report.sweep import _group_table

    def done(seed: int, steps: list[int], mse: float) -> dict:
        return {"status": "completed", "config": {"seed": seed, "workload": {"fd_steps": steps}},
                "final_metrics": {"test_mse": mse}}

    variants = {"a": done(0, [2, 4], 0.1), "b": done(1, [2, 4], 0.3), "c": done(0, [8], 0.5)}
    table = _group_table(variants, ["workload.fd_steps", "seed"], ["test_mse"])
    # one row per list value, the two seeds of [2, 4] folded into one mean
    assert "[2, 4]" in table and "[8]" in table and "0.2" in table


def test_a_variant_with_many_keys_gets_a_folder_name_the_file_system_takes():
    from testbed.sweep import MAX_SLUG, variant_slug

    many = {f"decentralized.setting_number_{i}": 1000 + i for i in range(30)}
    slug, other = variant_slug(many), variant_slug({**many, "decentralized.setting_number_29": 0})
    assert len(slug) == MAX_SLUG and slug != other and slug[:40] == other[:40]
    assert variant_slug({**many, "seed": 3}).endswith("seed=3")
