"""`OodAudit`: OODRobustBench's evaluation of a run's final model, the audit the ``oodrobust`` workload
offers to other kinds (``report: {kind: robustness, ood: {...}}`` of a federated run).

`testbed.workloads.audits` finds it where oodrobust's config module names it (``AUDITS``); the run's
numbers join its final metrics (prefixed ``ood_``) and the per-shift accuracies its artifacts, which
`OodAuditSection` renders in the robustness report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from testbed.seeding import stream
from testbed.workloads.audits import Audit
from testbed.workloads.oodrobust.config import OodConfig
from testbed.workloads.oodrobust.report import OodAuditSection

if TYPE_CHECKING:
    import torch

    from testbed.data import Dataset
    from testbed.data.config import DataConfig
    from testbed.seeding import SeedTree

# The seed of the audit's corruptions and attacks, drawn from the run's tree (`RunContext.seeds`).
OOD_SEED = stream("report.ood", "the OOD audit's corruption and attack draws on a final model")
AGGREGATES = ("clean_accuracy", "id_robust", "ood_d_clean", "ood_d_robust", "ood_t_robust", "ood_d_retention")


class OodAudit(Audit):
    """A final model's robust accuracy in distribution and under dataset and threat shifts."""

    name = "ood"
    Config = OodConfig
    kinds = ("federated",)  # the runs whose runner audits its final model
    report_kind = "robustness"
    section = OodAuditSection()

    @classmethod
    def check(cls, config: OodConfig, data: DataConfig) -> None:
        """Refuse data the benchmark cannot evaluate (tabular features, pixels outside [0, 1])."""
        from testbed.data import load_selected
        from testbed.workloads.oodrobust.benchmark import check_image_data

        check_image_data(load_selected(data))

    @classmethod
    def run(cls, model: torch.nn.Module, test_set: Dataset, config: OodConfig,
            seeds: SeedTree) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """(final metrics ``ood_*``, report arrays ``ood_shift_*``) of ``model``."""
        from testbed.determinism import single_threaded
        from testbed.workloads.oodrobust.benchmark import evaluate_ood

        with single_threaded():
            result = evaluate_ood(model, test_set, config, seeds.integer(OOD_SEED.path))
        # Retention is undefined (NaN) for a model with no ID robustness; leave it out rather than write NaN.
        metrics = {("ood_" + key if not key.startswith("ood_") else key): value
                   for key, value in result.items() if key in AGGREGATES and not np.isnan(value)}
        shifts = [key.split("/", 1)[1] for key in result if key.startswith("robust/")]
        arrays = {"ood_shift_names": np.array(shifts),
                  "ood_shift_clean": np.array([result.get(f"clean/{s}", result["clean_accuracy"]) for s in shifts]),
                  "ood_shift_robust": np.array([result[f"robust/{s}"] for s in shifts])}
        return metrics, arrays
