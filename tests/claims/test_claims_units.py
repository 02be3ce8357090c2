"""The claims mechanism on hand-made sweeps: parsing, intervals, pairing, preconditions, verdicts."""

from __future__ import annotations

import math

import pytest

from testbed.claims.config import ClaimsConfig
from testbed.claims.evaluate import check_claims, evaluate
from testbed.claims.expressions import ExpressionError, parse_comparison
from testbed.claims.statistics import paired_interval
from testbed.errors import ScenarioError


def _variants(arms: dict[str, float], seeds=range(5), attacks=(None,)) -> dict:
    """``{slug: raw scenario}`` for arms told apart by ``workload.variant`` (and an attack key)."""
    out = {}
    for arm in arms:
        for attack in attacks:
            for seed in seeds:
                raw = {"seed": seed, "workload": {"variant": arm}}
                if attack is not None:
                    raw["federated"] = {"attack": {"name": attack}}
                out[f"{arm},{attack},{seed}"] = raw
    return out


def _claims(*statements: dict, **extra) -> ClaimsConfig:
    return ClaimsConfig.model_validate({
        "paper": "bisam", "arms": {"a": {"workload.variant": "a"}, "b": {"workload.variant": "b"},
                                   "base": {"workload.variant": "base"}},
        "statements": [{"id": f"s{i}", "quote": "q", "source": "Table 1", **s} for i, s in enumerate(statements)],
        **extra})


def test_margin_is_positive_where_the_comparison_holds():
    metrics = {"a": {"err": 1.0}, "b": {"err": 4.0, "odd-name": 2.0}}
    assert parse_comparison("a.err / b.err < 0.5").margin(metrics) == pytest.approx(0.25)
    assert parse_comparison("b.err > a.err").margin(metrics) == pytest.approx(3.0)
    assert parse_comparison('abs(a.err - b["odd-name"]) >= 2').margin(metrics) == pytest.approx(-1.0)


@pytest.mark.parametrize("text", ["a.x", "a.x == b.x", "1 > 0", "a.x > b.x > c.x", "a.x.y > 1", "a.x > b.x or 1",
                                  "__import__('os').system('true') > 1", "a.x > lambda: 1", "a.x > open.x(1)",
                                  "a.x >"])
def test_what_is_not_a_comparison_of_arm_metrics_does_not_parse(text):
    with pytest.raises(ExpressionError):
        parse_comparison(text)


def test_t_interval_matches_a_hand_computed_value():
    # margins 1, 2, 3, 2.5, 1.5: mean 2, var 2.5 / 4, se sqrt(0.125) = 0.3535534,
    # t(0.975, 4) = 2.7764451 -> half 0.9816216
    interval = paired_interval([1, 2, 3, 2.5, 1.5], 0.95, "t")
    assert interval is not None and interval.method == "t"
    assert (interval.low, interval.high) == (pytest.approx(1.0183784, abs=1e-6), pytest.approx(2.9816216, abs=1e-6))
    wider = paired_interval([1, 2, 3, 2.5, 1.5], 0.99, "t")
    assert wider is not None and wider.low < interval.low


def test_bootstrap_interval_is_reproducible_and_inside_the_data():
    first = paired_interval([0.1, -0.2, 0.3, 0.05, 0.0], 0.95, "bootstrap")
    again = paired_interval([0.1, -0.2, 0.3, 0.05, 0.0], 0.95, "bootstrap")
    assert first == again and first is not None
    assert -0.2 <= first.low < first.mean < first.high <= 0.3


def test_one_seed_gives_no_interval_unless_the_metric_is_deterministic():
    assert paired_interval([0.4], 0.95, "t") is None
    exact = paired_interval([0.4], 0.95, "t", deterministic=True)
    assert exact is not None and exact.low == exact.high == 0.4 and exact.method == "exact"


def test_pairing_by_seed_finds_a_small_gain_that_varies_a_lot_between_seeds():
    # a = b + 0.01 on every seed, while the seeds themselves spread by 0.2: paired, the gain is clear.
    base = [0.5, 0.7, 0.3, 0.9, 0.6]
    metrics = {f"{arm},None,{s}": {"acc": base[s] + (0.01 if arm == "a" else 0.0)} for arm in "ab" for s in range(5)}
    [verdict] = evaluate(_claims({"predicate": "a.acc > b.acc"}), _variants({"a": 0, "b": 0}), metrics, "f.yaml")
    assert verdict.verdict == "reproduced"
    [group] = verdict.groups
    assert group.predicate is not None and group.predicate.interval is not None
    assert group.predicate.interval.mean == pytest.approx(0.01)
    assert group.predicate.left - group.predicate.right == pytest.approx(0.01)


@pytest.mark.parametrize(("gain", "expected"), [(-0.05, "not reproduced"), (0.0, "tie")])
def test_a_loss_or_no_gain_is_called_so(gain, expected):
    noise = [0.01, -0.02, 0.015, -0.01, 0.005]
    metrics = {f"a,None,{s}": {"acc": 0.5 + gain + noise[s]} for s in range(5)}
    metrics |= {f"b,None,{s}": {"acc": 0.5} for s in range(5)}
    [verdict] = evaluate(_claims({"predicate": "a.acc > b.acc"}), _variants({"a": 0, "b": 0}), metrics, "f.yaml")
    assert verdict.verdict == expected


def test_a_failed_precondition_makes_the_verdict_inconclusive_with_its_number():
    metrics = {f"{arm},None,{s}": {"acc": {"a": 0.6, "b": 0.5, "base": 0.495}[arm] + 0.001 * s}
               for arm in ("a", "b", "base") for s in range(5)}
    claims = _claims({"predicate": "a.acc > b.acc", "precondition": "b.acc - base.acc > 0.05"})
    [verdict] = evaluate(claims, _variants({"a": 0, "b": 0, "base": 0}), metrics, "f.yaml")
    assert verdict.verdict == "inconclusive"
    [group] = verdict.groups
    assert group.precondition_holds is False
    assert group.precondition is not None and group.precondition.left == pytest.approx(0.005)


def test_fewer_paired_seeds_than_needed_is_pending():
    metrics = {f"{arm},None,{s}": {"acc": 0.5 + (arm == "a") * 0.1 + 0.01 * s} for arm in "ab" for s in range(5)}
    del metrics["b,None,3"], metrics["a,None,4"]  # two seeds lose a side: three pairs remain
    [verdict] = evaluate(_claims({"predicate": "a.acc > b.acc"}), _variants({"a": 0, "b": 0}), metrics, "f.yaml")
    assert verdict.verdict == "pending" and verdict.groups[0].seeds == [0, 1, 2]


def test_for_each_holds_only_where_every_group_holds():
    variants = _variants({"a": 0, "b": 0}, attacks=("lie", "min_max"))
    jitter = [0.01, -0.01, 0.005, -0.005, 0.0]  # under min_max, a differs from b by noise only
    gain = {("a", "lie"): [0.1] * 5, ("a", "min_max"): jitter}
    arm_attack = {slug: (raw["workload"]["variant"], raw["federated"]["attack"]["name"])
                  for slug, raw in variants.items()}
    metrics = {slug: {"acc": 0.5 + 0.01 * raw["seed"] + gain.get(arm_attack[slug], [0] * 5)[raw["seed"]]}
               for slug, raw in variants.items()}
    [verdict] = evaluate(_claims({"predicate": "a.acc > b.acc", "for_each": "federated.attack.name"}),
                         variants, metrics, "f.yaml")
    assert [(g.group, g.verdict) for g in verdict.groups] == [("lie", "reproduced"), ("min_max", "tie")]
    assert verdict.verdict == "tie"


def test_an_arm_without_the_for_each_key_is_the_shared_baseline_of_every_group():
    # a and b under two attacks; "base" (no attack at all) is run once per seed, not once per attack.
    variants = {**_variants({"a": 0, "b": 0}, attacks=("lie", "min_max")), **_variants({"base": 0})}
    metrics = {slug: {"acc": {"a": 0.6, "b": 0.5, "base": 0.9}[raw["workload"]["variant"]] + 0.01 * raw["seed"]}
               for slug, raw in variants.items()}
    statement = {"predicate": "a.acc > b.acc", "precondition": "base.acc - b.acc >= 0.3",
                 "for_each": "federated.attack.name"}
    check_claims(_claims(statement), variants, "f.yaml")
    [verdict] = evaluate(_claims(statement), variants, metrics, "f.yaml")
    assert [(g.group, g.verdict, g.seeds) for g in verdict.groups] == [("lie", "reproduced", [0, 1, 2, 3, 4]),
                                                                      ("min_max", "reproduced", [0, 1, 2, 3, 4])]
    # An arm that has the key but not this group's value is not shared: it selects nothing there.
    only_lie = {slug: raw for slug, raw in variants.items() if "min_max" not in slug}
    with pytest.raises(ScenarioError, match="claims.arms.a: selects no variant of the sweep with "
                                            "federated.attack.name=min_max"):
        check_claims(_claims(statement), {**only_lie, "b,min_max,0": variants["b,min_max,0"]}, "f.yaml")
    # The groups are the values the statement's own arms take: a and b run under lie only here, an
    # arm the statement does not read (c, under min_max) adds no group.
    extra_arm = {f"c,min_max,{seed}": {"seed": seed, "workload": {"variant": "c"},
                                       "federated": {"attack": {"name": "min_max"}}} for seed in range(5)}
    narrowed = {**only_lie, **extra_arm}
    [verdict] = evaluate(_claims(statement), narrowed, {slug: {"acc": 0.5} for slug in narrowed}, "f.yaml")
    assert [g.group for g in verdict.groups] == ["lie"]


def test_an_unknown_metric_is_one_line_naming_the_field_and_the_closest_name():
    metrics = {f"{arm},None,{s}": {"test_accuracy": 0.5} for arm in "ab" for s in range(5)}
    with pytest.raises(ScenarioError, match=r"f.yaml: claims.statements.0.predicate: arm 'a' reports no metric "
                                            r"'test_acc' \(did you mean 'test_accuracy'\?\)"):
        evaluate(_claims({"predicate": "a.test_acc > b.test_accuracy"}), _variants({"a": 0, "b": 0}), metrics, "f.yaml")


def test_check_claims_refuses_arms_that_select_nothing_or_too_few_seeds():
    with pytest.raises(ScenarioError, match="claims.arms.base: selects no variant"):
        check_claims(_claims({"predicate": "a.acc > base.acc"}), _variants({"a": 0, "b": 0}), "f.yaml")
    with pytest.raises(ScenarioError, match="claims.seeds: the claims need 5 seeds; arm 'a' has 3"):
        check_claims(_claims({"predicate": "a.acc > b.acc"}), _variants({"a": 0, "b": 0}, seeds=range(3)), "f.yaml")
    with pytest.raises(ScenarioError, match=r"claims.statements.0.predicate: unknown arm 'c'"):
        check_claims(_claims({"predicate": "c.acc > b.acc"}), _variants({"a": 0, "b": 0}), "f.yaml")


def test_fewer_than_five_seeds_must_say_why():
    with pytest.raises(ValueError, match="fewer_seeds_because"):
        _claims({"predicate": "a.acc > b.acc"}, seeds=3)
    assert _claims({"predicate": "a.acc > b.acc"}, seeds=3, fewer_seeds_because="an hour a run").seeds == 3


def test_a_claim_measured_on_no_seed_is_pending_and_its_numbers_are_nan():
    [verdict] = evaluate(_claims({"predicate": "a.acc > b.acc"}), _variants({"a": 0, "b": 0}), {}, "f.yaml")
    assert verdict.verdict == "pending" and math.isnan(verdict.groups[0].predicate.left)


def test_a_record_of_another_scenario_is_stale_and_not_used():
    from testbed.claims.results import current, variant_hash

    variant = {"seed": 0, "workload": {"variant": "a", "lr": 0.1}, "engine": {"type": "local"}}
    on_ray = {**variant, "engine": {"type": "ray", "address": "auto"}}
    changed = {**variant, "workload": {"variant": "a", "lr": 0.2}}
    assert variant_hash(on_ray) == variant_hash(variant)  # same numbers on any engine
    records = {"a0": {"config": variant_hash(variant), "final_metrics": {"acc": 0.5}}}
    assert current(records, {"a0": on_ray}) == records
    assert current(records, {"a0": changed}) == {}


def test_a_sweep_folder_left_from_another_configuration_gives_no_record(tmp_path):
    import json

    import yaml

    from testbed.claims.results import record_of

    variant = {"seed": 0, "workload": {"variant": "a", "lr": 0.1}}
    folder = tmp_path / "variants" / "a0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(variant))
    (folder / "summary.json").write_text(json.dumps({"final_metrics": {"acc": 0.5}}))
    (tmp_path / "variants" / "a0.yaml").write_text(yaml.safe_dump(variant))
    assert record_of(folder, variant)["final_metrics"] == {"acc": 0.5}
    assert record_of(folder, variant)["cpu"]  # the machine that kept it, which the page names
    # the scenario changed since the folder ran: its numbers are not the new variant's
    assert record_of(folder, {**variant, "workload": {"variant": "a", "lr": 0.2}}) is None


def test_a_difference_of_floating_point_rounding_is_no_margin():
    # 10 vs 10 computed two ways differs by 1e-15: that must not make a claim reproduced.
    comparison = parse_comparison("a.eps < b.eps")
    assert comparison.margin({"a": {"eps": 10.0 - 5e-15}, "b": {"eps": 10.0}}) == 0.0
    assert comparison.margin({"a": {"eps": 9.99}, "b": {"eps": 10.0}}) == pytest.approx(0.01)
