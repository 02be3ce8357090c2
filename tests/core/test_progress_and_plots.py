"""Progress bars switch off for machines; report plots read the right axis and series."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from testbed.progress import ProgressReporter, progress_enabled
from testbed.report import plots
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


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions close, kept open for inspection."""
    figures = []
    monkeypatch.setattr(plots.pyplot(), "close", figures.append)
    return figures


def _cells(fig) -> dict[str, str]:
    return {text.get_text(): text.get_color() for text in fig.axes[0].texts}


def test_heatmap_text_contrasts_with_each_cell(tmp_path, drawn):
    plot_heatmap(tmp_path / "h.png", np.array([[0.0, 1.0], [1.0, 0.0]]), "row", "col")

    # viridis: dark purple at the low end, light yellow at the high end
    assert _cells(drawn[0]) == {"0": "white", "1": "black"}


def test_heatmap_of_a_near_constant_matrix_says_so_and_uses_its_range(tmp_path, drawn):
    matrix = np.full((4, 4), 8.0)
    matrix[0, 3] = 7.98
    np.fill_diagonal(matrix, np.nan)  # not a pair: blank, out of the range

    plot_heatmap(tmp_path / "h.png", matrix, "u", "v", title="pairs", cells="pairs")
    plot_heatmap(tmp_path / "c.png", np.full((3, 3), 8.0), "u", "v", cells="pairs")

    axes = drawn[0].axes[0]
    assert axes.get_title() == "pairs\n(all pairs within [7.98, 8])"
    assert (axes.images[0].norm.vmin, axes.images[0].norm.vmax) == (7.98, 8.0)
    assert len(axes.texts) == 12  # no number on the blank diagonal
    assert drawn[1].axes[0].get_title() == "all pairs within [8, 8]"


def test_heatmap_spanning_orders_of_magnitude_is_log_scaled_and_large_ones_unannotated(tmp_path, drawn):
    plot_heatmap(tmp_path / "l.png", np.array([[1e-3, 1.0], [10.0, 0.5]]), "row", "col")
    plot_heatmap(tmp_path / "z.png", np.array([[0.0, 1.0], [10.0, 1000.0]]), "row", "col")
    plot_heatmap(tmp_path / "b.png", np.arange(169.0).reshape(13, 13), "row", "col")

    assert isinstance(drawn[0].axes[0].images[0].norm, matplotlib.colors.LogNorm)
    assert not isinstance(drawn[1].axes[0].images[0].norm, matplotlib.colors.LogNorm)  # a zero: linear
    assert len(drawn[2].axes[0].texts) == 0
