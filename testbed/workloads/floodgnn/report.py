"""Report sections of ``floodgnn``: CSI against its all-wet floor, error growth over the rollout, and depth
maps of a held-out region and storm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import plot_curve, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, image, table

_CSI_NAMES = {"001": "1 mm", "01": "1 cm"}


class CSIFloorSection(ReportSection):
    """CSI on held-out regions x storms at each horizon and depth threshold, beside Rain-Incr's and the CSI
    of calling every cell wet: a CSI is only as good as its margin over that floor."""

    title = "Wet-area skill (CSI) against the all-wet floor"

    def render(self, data: RunData, out_dir: Path) -> str:
        final = (data.summary or {}).get("final_metrics", {})
        variant = str(data.config.get("workload", {}).get("variant", "model"))
        rows = []
        for key in sorted(k for k in final if k.startswith("test_csi") and "_allwet_" not in k):
            name, horizon = key[len("test_csi"):].split("_t")
            floor = final.get(f"test_csi{name}_allwet_t{horizon}")
            if floor is None:
                continue
            rows.append((int(horizon), _CSI_NAMES.get(name, name), float(final[key]),
                         float(final.get(f"rainincr_csi{name}_t{horizon}", float("nan"))), float(floor),
                         float(final[key]) - float(floor)))
        if not rows:
            return ""
        rows.sort()
        return table(rows, ("step", "wet above", variant, "rainincr", "all-wet floor", f"{variant} - floor"))


class ErrorGrowthSection(ArraySection):
    """RMSE (transformed depth) at every rollout step on held-out regions x storms, against Rain-Incr."""

    title = "Rollout error on held-out regions and storms"
    requires = ("rmse_curve", "rainincr_rmse_curve", "steps", "variant")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        steps = arrays["steps"].tolist()
        lines = {str(arrays["variant"]): (steps, arrays["rmse_curve"].tolist()),
                 "rainincr (in-run reference)": (steps, arrays["rainincr_rmse_curve"].tolist())}
        path = plot_curve(out_dir / "floodgnn-rmse-steps.png", "RMSE of log(1 + h / 1 cm) per step", "rollout step",
                          lines, ylabel="RMSE, log(1 + h / 1 cm)")
        return image(path.name, "RMSE over the rollout")


class DepthMapSection(ArraySection):
    """Terrain with its D8 graph, and the final depth: simulated, predicted, Rain-Incr."""

    title = "Depth at the end of the rollout (first held-out region x storm)"
    requires = ("truth_map", "predicted_map", "rainincr_map", "elevation", "edges", "combo", "variant")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        fig, axes = pyplot().subplots(1, 4, figsize=(16, 4.2), dpi=90)
        elevation, side = arrays["elevation"], arrays["elevation"].shape[0]
        axes[0].imshow(elevation, cmap="terrain")
        sources, targets = arrays["edges"][:, 0], arrays["edges"][:, 1]
        axes[0].quiver(sources % side, sources // side, targets % side - sources % side,
                       -(targets // side - sources // side), angles="xy", scale_units="xy", scale=1.4, width=0.003)
        axes[0].set_title(f"region {int(arrays['combo'][0])}: elevation and D8 edges")
        maps = [("simulated", arrays["truth_map"]), (str(arrays["variant"]), arrays["predicted_map"]),
                ("rainincr", arrays["rainincr_map"])]
        top = max(float(np.max(m)) for _, m in maps)
        for ax, (name, depth) in zip(axes[1:], maps):
            shown = ax.imshow(depth, cmap="Blues", vmin=0, vmax=top)
            ax.set_title(f"{name} (storm {int(arrays['combo'][1])})")
        fig.colorbar(shown, ax=axes.tolist(), label="log(1 + h / 1 cm) / 10", shrink=0.8)
        path = out_dir / "floodgnn-depth-maps.png"
        fig.savefig(path)
        pyplot().close(fig)
        return image(path.name, "depth maps")
