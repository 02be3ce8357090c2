"""testbed: one YAML scenario file, run locally or on a cluster, leaves a run folder with a report.

The package is organised by role: `scenario` (typed schema and loading), `cli`, `run` (run folders),
`engines` (where work is placed), `data`, `workloads`, `report`, `tracking`, `pretrain`.
"""

__version__ = "0.1.0"
