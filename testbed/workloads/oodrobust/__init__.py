"""OODRobustBench (Li, Wang, Sitawarin, Spratling, ICML 2024) in miniature: adversarial robustness in
distribution and under dataset and threat shifts, and its linear trend across a population of models.

``config`` holds the typed configs, torch-free: `OodConfig` (the benchmark of one model, also the
scenario's ``report.ood`` block) and the workload's `OODRobustConfig` with its check.
``benchmark.evaluate_ood(model, dataset, config)`` benchmarks any image classifier, with the
``attacks`` and ``shifts`` it applies; ``audit.OodAudit`` offers it as an audit of another kind's
final model (a federated run's global model). ``population`` and ``population_eval`` train and benchmark the zoo of
digit classifiers, ``fit`` fits OOD on ID robustness (effective robustness), ``typeset`` draws the
typeset-digits shift, ``report`` holds the report sections and ``workload`` the `OODRobustWorkload`.
"""
