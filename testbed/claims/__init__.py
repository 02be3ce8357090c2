"""Claims: a paper's statements as checked predicates over a sweep's per-seed final metrics.

A sweep scenario may carry a ``claims:`` block (`config.ClaimsConfig`): named *arms* (groups of
the sweep's variants), and *statements*, each a paper's sentence with its source, a precondition
(what must hold for the setting to test the claim at all) and a predicate over the arms' metrics
(`expressions`). `evaluate` pairs the arms by seed and turns each statement into a verdict with a
confidence interval of the paired difference (`statistics`); `results` keeps the per-seed final
metrics as small files in the repository, and `docs` renders ``docs/reproduction.md`` and the
per-paper tables from them. ``testbed reproduce`` (`reproduce`) runs or resumes the sweeps.
"""
