"""Report section of the ``classifier`` workload (and of ``bisam``): the final confusion matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.report.plots import plot_heatmap
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, image


class ConfusionSection(ArraySection):
    """The final model's confusion matrix on the test split, as a heatmap."""

    title = "Confusion matrix (test split)"
    requires = ("confusion",)
    leads = False  # a detail of the final model; the accuracy curves answer the run's question

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        path = plot_heatmap(out_dir / "confusion.png", arrays["confusion"], "true class", "predicted class")
        return image(path.name, "confusion matrix")
