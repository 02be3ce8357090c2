"""Progress bars switch off for machines; report plots read the right axis and series."""

from __future__ import annotations

from testbed.progress import ProgressReporter, progress_enabled
from testbed.report.plots import numeric_series, plot_heatmap, x_axis
from testbed.report.sections import table


def test_progress_is_silent_under_quiet_and_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "1")
    assert not progress_enabled(quiet=False)
    monkeypatch.delenv("CI")
    assert not progress_enabled(quiet=True)
    with ProgressReporter(enabled=False).task("x", total=3) as advance:
        advance(2)  # a no-op bar accepts advances


def test_series_use_rounds_for_federated_records_and_skip_flags():
    records = [{"round": 1, "acc": 0.5, "ok": True}, {"round": 2, "acc": 0.7, "ok": False}]
    assert x_axis(records) == "round" and x_axis([{"step": 3}]) == "step"
    assert numeric_series(records) == {"acc": ([1, 2], [0.5, 0.7])}


def test_heatmap_and_table_render(tmp_path):
    import numpy as np

    path = plot_heatmap(tmp_path / "h.png", np.eye(3), "row", "col")
    assert path.stat().st_size > 1000
    assert table([(1.23456, "<b>")], ("x", "y")) == \
        "<table><thead><tr><th>x</th><th>y</th></tr></thead><tbody><tr><td>1.235</td><td>&lt;b&gt;</td></tr></tbody></table>"
