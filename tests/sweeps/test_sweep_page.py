"""A sweep page's first lines: its run line, the privacy-utility chart of a DP sweep, and no chart of
a curve that is the same constant in every group (issue 38, item 3 and 5)."""

from __future__ import annotations

from testbed.report.privacy_utility import privacy_utility
from testbed.report.sweep import _curves, group_variants, run_line


def _variant(z, seed, epsilon, accuracy, bound=None, plain=None, commit="abc123", wall=2.5):
    record = {"round": 3, "test_accuracy": accuracy, "epsilon": epsilon}
    if bound is not None:
        record["privacy.audit.epsilon_lower_bound"] = bound
    final = {"baselines.no_privacy.test_accuracy": plain} if plain is not None else {}
    return {"status": "completed", "config": {"seed": seed, "federated": {"privacy": {"noise_multiplier": z,
                                                                                   "clipping_norm": 1.0}}},
            "metrics": [{"round": 1, "test_accuracy": 0.1, "epsilon": epsilon / 3}, record],
            "summary": {"status": "completed", "final_metrics": final, "timings": {"wall_s": wall},
                        "source": {"commit": commit, "dirty": False}, "engine": {"type": "local"}}}


def test_the_run_line_counts_the_variants_and_names_their_commit_time_and_engine():
    variants = {"a": _variant(1.0, 0, 2.0, 0.5), "b": _variant(1.0, 1, 2.0, 0.6, wall=5.0),
                "c": {"status": "failed", "summary": {}}}

    line = run_line(variants)

    assert "2 of 3 variants completed" in line and "commit abc123" in line
    assert "7.5 s wall time summed over variants" in line and "engine local" in line


def test_a_dp_sweep_draws_accuracy_against_epsilon_with_the_audit_and_the_non_private_line(tmp_path):
    variants = {f"z{z}-s{s}": _variant(z, s, epsilon, accuracy + 0.01 * s, bound=epsilon / 4, plain=0.9)
                for z, epsilon, accuracy in ((0.5, 9.0, 0.8), (2.0, 1.0, 0.5), (1.0, 3.0, 0.7)) for s in (0, 1)}

    html = privacy_utility(variants, tmp_path)

    assert (tmp_path / "privacy-utility.png").stat().st_size > 5_000
    rows = html.split("<tr>")[2:]  # the header row first
    assert [row.split("</td>")[0] for row in rows] == ["<td>z = 2.0, C = 1.0", "<td>z = 1.0, C = 1.0",
                                                       "<td>z = 0.5, C = 1.0"]  # by epsilon, lowest first
    assert "<td>0.705</td>" in rows[1] and "<td>0.75</td>" in rows[1] and "<td>2</td>" in rows[1]
    assert privacy_utility({k: v for k, v in variants.items() if k.startswith("z0.5")}, tmp_path) == ""


def test_a_curve_that_is_one_constant_in_every_group_is_a_sentence_not_a_chart(tmp_path):
    variants = {f"{g}-{s}": {"status": "completed", "config": {"seed": s, "group": g},
                             "metrics": [{"round": r, "clients_trained": 10.0, "test_accuracy": 0.1 * r + (g == "b")}
                                         for r in (1, 2, 3)]}
                for g in ("a", "b") for s in (0, 1)}
    grouping = group_variants(variants, ["group", "seed"])

    html = _curves(variants, grouping, ["clients_trained", "test_accuracy"], tmp_path)

    assert "The same constant in every variant group, over the whole run: clients_trained" in html
    assert html.count("<img") == 1 and (tmp_path / "sweep-curves.png").is_file()
    assert not (tmp_path / "sweep-curves-1.png").exists()
