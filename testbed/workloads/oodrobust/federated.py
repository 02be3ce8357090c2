"""The OOD part of a federated robustness audit: benchmark the final global model (``report.ood``).

The federated runner calls `audit_global_model` after the last round; the numbers join the run's
final metrics (prefixed ``ood_``) and the per-shift accuracies its artifacts, which
`report.OodAuditSection` renders in the robustness report.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testbed.data import Dataset
from testbed.determinism import single_threaded
from testbed.seeding import SeedTree
from testbed.workloads.oodrobust.benchmark import evaluate_ood
from testbed.workloads.oodrobust.config import OodConfig

AGGREGATES = ("clean_accuracy", "id_robust", "ood_d_clean", "ood_d_robust", "ood_t_robust", "ood_d_retention")


def audit_global_model(model: torch.nn.Module, test_set: Dataset, config: OodConfig,
                       seed: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """(final metrics ``ood_*``, report arrays ``ood_shift_*``) of the final global model."""
    with single_threaded():
        result = evaluate_ood(model, test_set, config, SeedTree(seed).integer("report.ood"))
    # Retention is undefined (NaN) for a model with no ID robustness; leave it out rather than write NaN.
    metrics = {("ood_" + key if not key.startswith("ood_") else key): value
               for key, value in result.items() if key in AGGREGATES and not np.isnan(value)}
    shifts = [key.split("/", 1)[1] for key in result if key.startswith("robust/")]
    arrays = {"ood_shift_names": np.array(shifts),
              "ood_shift_clean": np.array([result.get(f"clean/{s}", result["clean_accuracy"]) for s in shifts]),
              "ood_shift_robust": np.array([result[f"robust/{s}"] for s in shifts])}
    return metrics, arrays


def audit_federated_run(scenario: Any, setup: Any, global_state: dict[str, torch.Tensor]) -> tuple[dict, dict]:
    """Rebuild the final global model of a federated run and audit it on the run's test split."""
    model = setup.build_model()
    model.load_state_dict(global_state)
    return audit_global_model(model, setup.test, scenario.report.ood, scenario.seed)


def check_ood_data(scenario: Any, source: str) -> None:
    """Refuse ``report.ood`` on data it cannot evaluate (tabular features, pixels outside [0, 1])."""
    from testbed.data import load_selected
    from testbed.errors import ScenarioError
    from testbed.workloads.oodrobust.benchmark import check_image_data

    try:
        check_image_data(load_selected(scenario.data))
    except ValueError as err:
        raise ScenarioError(f"{source}: report.ood: {err}") from None
