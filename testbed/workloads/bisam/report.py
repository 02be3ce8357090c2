"""Report section of the ``bisam`` workload: the 0-1 error along each ascent direction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, image


class PerturbationProfileSection(ArraySection):
    """How much each ascent direction raises the training 0-1 error, and the lower bound under it."""

    title = "0-1 error along the perturbation directions (final weights, 512 training samples)"
    requires = ("profile_radius", "profile_error_surrogate", "profile_error_ce", "profile_surrogate")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        radii = arrays["profile_radius"].tolist()
        lines = {"0-1 error along grad Q (BiSAM)": (radii, arrays["profile_error_surrogate"].tolist()),
                 "0-1 error along grad CE (SAM)": (radii, arrays["profile_error_ce"].tolist()),
                 "Q lower bound along grad Q": (radii, arrays["profile_surrogate"].tolist())}
        path = plot_curve(out_dir / "bisam-profile.png", "perturbation strength", "radius ||eps||", lines,
                          ylabel="0-1 error / Q bound (fraction)")
        return image(path.name, "0-1 error against perturbation radius")
