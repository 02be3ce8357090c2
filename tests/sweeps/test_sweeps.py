"""Sweeps: variants in parallel sub-run folders, failures isolated, reruns skip finished variants."""

from __future__ import annotations

import json

import pytest

from testbed.faults import KILL_AFTER_RECORDS
from testbed.report.sweep import compared_metrics
from testbed.run import RunFolder
from testbed.sweep import expand_variants, variant_slug
from tests.browser import assert_readable
from tests.conftest import TINY_SCENARIO, requires_chromium
from tests.processes import cli_process

SWEEP = {
    **TINY_SCENARIO,
    "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
    "training": {"steps": 8, "eval_every": 4, "checkpoint_every": 4},
    "sweep": {"grid": {"seed": [1, 2]}, "variants": [{"training.steps": 8}, {"training.steps": 16}], "parallel": 2},
}


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


@pytest.mark.integration
def test_sweep_runs_variants_isolates_failures_and_reruns_only_unfinished(write_scenario, tmp_path):
    path = write_scenario(SWEEP)
    sweep_dir = tmp_path / "sweep"

    # Every variant process dies at its 3rd record: the 8-step variants (2 records) finish, the 16-step ones do not.
    first = cli_process("run", path, "--run-dir", sweep_dir, "--quiet", env_extra={KILL_AFTER_RECORDS: "3"})

    assert first.returncode == 0, first.stderr
    summary = json.loads((sweep_dir / "summary.json").read_text())
    statuses = {slug: r["status"] for slug, r in summary["variants"].items()}
    assert sorted(statuses.values()) == ["completed", "completed", "failed", "failed"]
    assert all(("steps=16" in slug) == (status == "failed") for slug, status in statuses.items())
    assert "2 variants completed, 2 failed" in first.stdout and "killed by signal 9" in first.stdout
    assert "[1/4]" not in first.stderr  # --quiet: no status lines

    second = cli_process("run", path, "--run-dir", sweep_dir)  # not a terminal: a plain line per variant

    assert second.returncode == 0, second.stderr
    results = json.loads((sweep_dir / "summary.json").read_text())["variants"]
    assert all(r["status"] == "completed" for r in results.values())
    assert {slug: r["skipped"] for slug, r in results.items()} == {slug: "steps=8" in slug for slug in results}
    lines = [line for line in second.stderr.splitlines() if line.startswith("[")]
    assert sorted(line.split()[2] for line in lines) == sorted(results) and "test_accuracy" in lines[-1]
    page = (sweep_dir / "report" / "index.html").read_text()
    assert "Means over seeds" in page and "sweep-curves.png" in page
    assert all(f'href="../variants/{slug}/report/index.html"' in page for slug in results)


@pytest.mark.integration
@requires_chromium
def test_sweep_report_leads_with_the_comparison_and_links_every_variant_in_headless_chromium(write_scenario, tmp_path):
    sweep = {**SWEEP, "sweep": {"grid": {"seed": [1, 2], "workload.hidden": [4, 8]}, "parallel": 2}}
    done = cli_process("run", write_scenario(sweep), "--run-dir", tmp_path / "sweep", "--quiet")
    assert done.returncode == 0, done.stderr

    page = assert_readable(tmp_path / "sweep" / "report", first_screen="sweep-curves.png", name="sweep")
    assert page.sections == ["Means over seeds", "Curves (mean over seeds)", "Variants"]
    html = (tmp_path / "sweep" / "report" / "index.html").read_text()
    assert html.count('/report/index.html">') == 4 and "over 2 seeds" in html


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
    from testbed.report.sweep import _group_table, group_variants

    def done(seed: int, steps: list[int], mse: float) -> dict:
        return {"status": "completed", "config": {"seed": seed, "workload": {"fd_steps": steps}},
                "final_metrics": {"test_mse": mse}}

    variants = {"a": done(0, [2, 4], 0.1), "b": done(1, [2, 4], 0.3), "c": done(0, [8], 0.5)}
    table = _group_table(variants, group_variants(variants, ["workload.fd_steps", "seed"]), ["test_mse"])
    # one row per list value, the two seeds of [2, 4] folded into one mean
    assert "[2, 4]" in table and "[8]" in table and "0.2" in table


def test_a_variant_with_many_keys_gets_a_folder_name_the_file_system_takes():
    from testbed.sweep import MAX_SLUG, variant_slug

    many = {f"decentralized.setting_number_{i}": 1000 + i for i in range(30)}
    slug, other = variant_slug(many), variant_slug({**many, "decentralized.setting_number_29": 0})
    assert len(slug) == MAX_SLUG and slug != other and slug[:40] == other[:40]
    assert variant_slug({**many, "seed": 3}).endswith("seed=3")


def _hand_made_federated_sweep(root) -> RunFolder:
    """A federated sweep folder as a run leaves it, without running anything: strategy x attack
    (two LIEs that share a name) x seed, plus a variants key under the strategy's (which once
    repeated the strategy's name in labels); one variant failed before it made its folder."""
    lie, marsfl = {"name": "lie", "fraction": 0.25}, {"name": "lie", "fraction": 0.25, "threat_model": "marsfl"}
    arms = {"a": ("fedavg", lie, 0, 0.50), "b": ("fedavg", lie, 1, 0.70), "c": ("fedavg", marsfl, 0, 0.40),
            "d": ("sdea", marsfl, 0, 0.80)}
    sweep = {"grid": {"federated.strategy": [{"name": "fedavg"}, {"name": "sdea"}], "federated.attack": [lie, marsfl],
                      "seed": [0, 1]}, "variants": [{"federated.strategy.name": "fedavg"}]}
    folder = RunFolder.create(root / "sweep", {"name": "fed", "kind": "federated", "sweep": sweep})
    results: dict[str, dict] = {"e": {"status": "failed", "error": "interrupted before it started"}}
    for slug, (strategy, attack, seed, accuracy) in arms.items():
        variant = RunFolder.create(root / "sweep" / "variants" / slug, {
            "kind": "federated", "seed": seed, "federated": {"strategy": {"name": strategy}, "attack": attack}})
        for step in (1, 2):
            variant.append_metrics({"round": step, "test_accuracy": accuracy * step / 2,
                                    "malicious_weight": 0.1 * step})
        final = {"test_accuracy": accuracy, "malicious_weight": 0.1, "attacker_auroc": 0.9}
        variant.write_summary({"final_metrics": final})
        variant.report_dir.mkdir()
        (variant.report_dir / "index.html").write_text("<html></html>")
        results[slug] = {"status": "completed", "final_metrics": final}
        variant.unlock()
    folder.write_summary({"variants": results})
    return folder


def test_the_report_links_each_variant_and_labels_groups_by_key_without_repeats(tmp_path):
    import re

    from testbed.report.sweep import group_variants, render_sweep_report

    sweep = _hand_made_federated_sweep(tmp_path)
    page = render_sweep_report(sweep).read_text()

    links = re.findall(r'<a href="([^"]+)">(\w+)</a>', page)
    assert links == [(f"../variants/{s}/report/index.html", s) for s in "abcd"]  # e: failed, no report
    assert all((sweep.report_dir / href).resolve().is_file() for href, _ in links)
    variants = {s: {**r, "config": RunFolder(sweep.path / "variants" / s).read_config() if s != "e" else {}}
                for s, r in sweep.read_summary()["variants"].items()}
    grouping = group_variants(variants, ["federated.strategy", "federated.attack", "seed", "federated.strategy.name"])
    assert grouping.names == ["strategy", "attack"]
    assert sorted(grouping.label(g) for g in set(grouping.of.values())) == [
        "strategy=fedavg, attack=lie", "strategy=fedavg, attack=lie+threat_model=marsfl",
        "strategy=sdea, attack=lie+threat_model=marsfl"]
    # A federated sweep compares its robustness metrics by default.
    assert "<th>malicious_weight</th>" in page and "<th>attacker_auroc</th>" in page
    # one chart per compared metric recorded over the rounds (attacker_auroc is a final value only)
    assert "sweep-curves.png" in page and "sweep-curves-1.png" in page and "sweep-curves-2.png" not in page
    assert (sweep.report_dir / "sweep-curves-1.png").stat().st_size > 1000


def test_a_spread_is_shown_over_two_seeds_or_more_only(tmp_path):
    from testbed.report.sweep import mean_spread, render_sweep_report

    assert mean_spread([0.5]) == "0.5000 (1 seed)" and mean_spread([0.5, 0.7]) == "0.6000 ± 0.1000"
    page = render_sweep_report(_hand_made_federated_sweep(tmp_path)).read_text()
    # fedavg under the first LIE has two seeds; every other group, in both tables, one
    assert page.count("±</td>") == 0 and page.count("0.6000 ± 0.1000") == 2 and "± 0.0000 (1 seed)" not in page
    assert page.count("(1 seed)</td>") == 2 * 3 + 2  # two one-seed groups x 3 metrics, and two pivot cells
    assert "mean ± std (population) over 1 to 2 seeds" in page
