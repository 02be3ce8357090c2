"""The privacy report's sections on hand-made run data: audit verdicts and power, folded heatmaps
and curves, the honest distance axis, the noise-free reference lines."""

import numpy as np
import pytest

from testbed.decentralized import report
from testbed.decentralized.audit import audit_power
from testbed.report.render import RunData

CONFIG = {"kind": "decentralized", "decentralized": {
    "privacy": {"target_epsilon": 8.0, "delta": 1e-5},
    "audit": {"canaries": 200, "source": 0, "significance": 0.05},
    "comparison": {"alpha": 2.0, "sigma": 1.0}}}


def _data(tmp_path, artifacts: dict, final: dict | None = None, metrics: list | None = None) -> RunData:
    summary = {"final_metrics": final or {}}
    return RunData(path=tmp_path, config=CONFIG, metrics=metrics or [], summary=summary, artifacts=artifacts)


def _audit(lower, upper) -> dict:
    return {"observer": np.array([1, 2]), "distance": np.array([1, 2]), "lower": np.array(lower),
            "upper": np.array(upper)}


def test_audit_verdicts_tell_a_violation_a_weak_audit_and_a_tight_bound(tmp_path):
    # random walk: power 3 (recorded); gossip: no recorded power, from the config (every guess right)
    arrays = {f"random_walk.audit_{k}": v for k, v in _audit([2.5, 1.0], [2.0, 4.0]).items()}
    arrays |= {f"gossip.audit_{k}": v for k, v in _audit([1.5, 0.2], [2.0, 8.0]).items()}

    page = report.AuditSection().render(_data(tmp_path, arrays, {"random_walk.audit_power": 3.0}), tmp_path)

    fallback = audit_power(200, 1e-5, 0.05)
    assert "VIOLATION (accountant wrong)" in page  # 2.5 > 2
    assert "audit too weak to test the bound (it can show at most 3)" in page  # upper 4 > power 3
    assert "tightness lower/upper = 0.75" in page  # gossip: 1.5 of 2, within the power
    assert f"(it can show at most {fallback:.3g})" in page  # gossip at 8
    assert "confidence 95%" in page and "at most detectable (power)" in page
    assert "lower &lt;= upper" not in page
    assert "random walk: 2 pairs: 1 violation, 1 too weak to test" in page
    assert (tmp_path / "audit-random_walk.png").exists()


def test_constant_pairwise_matrices_are_one_line_and_near_constant_ones_say_their_range(tmp_path):
    constant = np.full((3, 3), 8.0)
    near = constant.copy()
    near[0, 2] = 7.98
    for matrix in (constant, near):
        np.fill_diagonal(matrix, 0.0)  # as the driver writes them: u = u is no pair

    page = report.HeatmapSection().render(
        _data(tmp_path, {"local_dp.pairwise_epsilon": constant, "random_walk.pairwise_epsilon": near}), tmp_path)

    assert "local DP: every pair u -&gt; v at epsilon 8 (no heatmap: one value)" in page
    assert "random walk: every pair u -&gt; v spends 7.980-8.000 (no heatmap: a spread under 1%" in page
    assert not list(tmp_path.glob("pairwise-*.png"))  # a 0.25% spread is said, not drawn at full contrast


def test_the_runs_distance_curve_starts_at_zero_with_the_target_and_folds_equal_curves(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(report.pyplot(), "close", figures.append)
    curve = {"distance": np.array([1, 2, 3]), "distance_mean": np.array([8.0, 7.0, 6.0]),
             "distance_min": np.array([8.0, 7.0, 6.0]), "distance_max": np.array([8.0, 7.0, 6.0])}
    flat = {**curve, "distance_mean": np.full(3, 8.0), "distance_min": np.full(3, 8.0), "distance_max": np.full(3, 8.0)}
    arrays = {f"{alg}.pairwise_epsilon": np.zeros((2, 2)) for alg in ("random_walk", "gossip", "local_dp")}
    arrays |= {f"random_walk.{k}": v for k, v in curve.items()}
    arrays |= {f"{alg}.{k}": v for alg in ("gossip", "local_dp") for k, v in flat.items()}

    page = report.DistanceSection().render(_data(tmp_path, arrays), tmp_path)

    axes = figures[0].axes[0]
    assert axes.get_ylim()[0] == 0 and axes.get_ylim()[1] > 8.0
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["random walk", "gossip = local DP", "target 8"]
    assert axes.get_xlabel() == "shortest-path distance (hops)" and "(nats)" in axes.get_ylabel()
    assert "Curves that coincide are drawn once" in page


def test_utility_plots_draw_the_noise_free_arms_as_reference_lines(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(report.pyplot(), "close", figures.append)
    metrics = [{"step": s, "gossip.epsilon": e, "gossip.test_accuracy": a, "gossip.test_loss": loss}
               for s, e, a, loss in ((0, 0.0, 0.5, 0.69), (5, 4.0, 0.8, 0.5))]
    final = {"nonprivate.gossip.test_accuracy": 0.95, "nonprivate.gossip.test_loss": 0.2}

    page = report.UtilitySection().render(_data(tmp_path, {}, final, metrics), tmp_path)

    accuracy, loss = (f.axes[0] for f in figures)
    assert [t.get_text() for t in accuracy.get_legend().get_texts()] == ["gossip", "gossip, no noise"]
    assert accuracy.lines[1].get_ydata()[0] == pytest.approx(0.95)
    assert loss.lines[1].get_ydata()[0] == pytest.approx(0.2)
    assert loss.get_ylabel() == "test loss (cross-entropy, nats)"
    assert "Dashed: the same algorithm with no noise" in page
