"""Report sections of the ``aco`` workload: accuracy against acquisition cost, and which features each policy buys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, image, table


class AccuracyCostSection(ArraySection):
    """Accuracy against the mean number of acquired features, one point per cost alpha (the paper's plot)."""

    title = "Accuracy against acquisition cost (test instances)"
    requires = ("policies", "curve_cost", "curve_accuracy", "curve_features")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        names = [str(n) for n in arrays["policies"]]
        lines = {name: (arrays["curve_features"][i].tolist(), arrays["curve_accuracy"][i].tolist())
                 for i, name in enumerate(names)}
        path = plot_curve(out_dir / "aco-accuracy-cost.png", "accuracy vs features acquired", "mean features acquired",
                          lines, ylabel="test accuracy (fraction correct)")
        rows = [(f"{cost:g}", *(f"{arrays['curve_accuracy'][i][j]:.3f} @ {arrays['curve_features'][i][j]:.2f}"
                                for i in range(len(names))))
                for j, cost in enumerate(arrays["curve_cost"].tolist())]
        return image(path.name, "accuracy against cost") + table(rows, ("cost alpha", *names))


class FeatureFrequencySection(ArraySection):
    """How often each policy acquires each feature, at the configured cost."""

    title = "Features acquired, by policy (share of test instances)"
    requires = ("policies", "acquired_frequency")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        features = list(range(arrays["acquired_frequency"].shape[1]))
        lines = {str(name): (features, arrays["acquired_frequency"][i].tolist())
                 for i, name in enumerate(arrays["policies"])}
        path = plot_curve(out_dir / "aco-feature-frequency.png", "share of instances acquiring each feature",
                          "feature index", lines, ylabel="share of test instances")
        return image(path.name, "acquisition frequency per feature")
