"""How metric series become charts: siblings overlaid, constants folded, axes labelled."""

from __future__ import annotations

from testbed.report import series


def _points(*ys: float) -> tuple[list[float], list[float]]:
    return [float(i) for i in range(len(ys))], list(ys)


def test_train_and_test_of_one_measure_share_a_chart_train_first():
    charts = series.charts({"test_loss": _points(3, 2), "train_loss": _points(2, 1), "test_accuracy": _points(.1, .5)})
    by_measure = {c.measure: c for c in charts}
    assert list(by_measure["loss"].lines) == ["train", "test"]
    assert by_measure["loss"].names == ["train_loss", "test_loss"]
    assert by_measure["accuracy"].title == "test accuracy"  # a single line keeps its metric's name
    assert by_measure["accuracy"].ylabel == "accuracy (fraction correct)"


def test_arms_of_a_comparison_share_a_chart_and_constants_are_folded():
    found = {"random_walk.test_loss": _points(1, .5), "gossip.test_loss": _points(1, .7),
             "clients_failed": _points(0, 0, 0), "once": _points(4.0)}
    charts = series.charts(found)
    assert [(c.measure, sorted(c.lines)) for c in charts] == [("loss", ["gossip test", "random_walk test"])]
    assert series.constants(found) == {"clients_failed": 0}  # "once" is a final value, not a flat curve


def test_a_measure_with_too_many_lines_gets_a_chart_per_line():
    found = {f"arm{i}.test_loss": _points(-1, i) for i in range(series.MAX_LINES + 1)}
    assert len(series.charts(found)) == series.MAX_LINES + 1


def test_names_split_into_arm_split_and_measure_and_units_match_the_longest_ending():
    assert series.split_name("gossip.test_loss") == ("gossip", "test", "loss")
    assert series.split_name("heldout_ppl") == ("", "heldout", "ppl")
    assert series.split_name("test_") == ("", "", "test_")  # a bare prefix is no split
    assert series.axis_label("aggregation_s") == "aggregation s (seconds)"
    assert series.axis_label("tokens_per_s_per_process") == "tokens per s per process (per second per process)"
    assert series.axis_label("distance_1") == "distance 1"


def test_numbered_members_of_a_measure_share_a_chart_in_numeric_order():
    found = {f"test_distance_{k}": _points(k, -1) for k in (64, 2, 1, 16)}
    [chart] = series.charts(found)
    assert chart.measure == "distance" and list(chart.lines) == ["test 1", "test 2", "test 16", "test 64"]
