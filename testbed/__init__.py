"""testbed: one YAML scenario file, run locally or on a cluster, leaves a run folder with a report.

The package is organised by role (docs/architecture.md draws the layers): `scenario` and `loading`
(the typed schema), `cli`, `run` (run folders), `engines` (the only code that knows where work
runs), `data`, `report`, `trackers`, and one package per scenario kind with its runner
(`workloads`, `federated`, `decentralized`, `pretrain`, listed in `kinds`). The libraries
`testbed.strategies`, `testbed.topologies` and `testbed.cluster` live in the top-level folders
`strategies/`, `topologies/` and `cluster/` and import nothing above them. Nothing is imported here.
"""

__version__ = "0.1.0"
