"""OODRobustBench (Li, Wang, Sitawarin, Spratling, ICML 2024) in miniature: adversarial robustness in
distribution and under dataset and threat shifts, and its linear trend across a population of models.

`evaluate_ood(model, dataset, config)` benchmarks any image classifier (`OodConfig` is its typed
config, the scenario's ``report.ood`` block); `audit_global_model` is its use on a federated run's
final global model; importing the package registers the ``oodrobust`` workload (a population of
digit classifiers, the fit of OOD on ID robustness and effective robustness).
"""

from testbed.scenario import OodConfig
from testbed.workloads.oodrobust.benchmark import build_shifted_sets, evaluate_ood
from testbed.workloads.oodrobust.federated import audit_global_model
from testbed.workloads.oodrobust.fit import LinearFit, effective_robustness, fit_line
from testbed.workloads.oodrobust.workload import OodRobustBench, OodRobustConfig

__all__ = ["LinearFit", "OodConfig", "OodRobustBench", "OodRobustConfig", "audit_global_model",
           "build_shifted_sets", "effective_robustness", "evaluate_ood", "fit_line"]
