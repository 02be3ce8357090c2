"""Private decentralized learning on a graph: random-walk DP-SGD, Muffliato gossip and local DP.

The package is the ``kind: decentralized`` scenario family (runner: `testbed.decentralized.runner`).
Modules, from the bottom up: `config` (the scenario block), `models` (flat node models and their
per-sample clipped gradients), `problem` (graph, walk matrix and node data, rebuilt identically in
every process), `phase` (one algorithm's resolved settings), `kernels` and `steps` (the algorithms
as pure functions of node states), `backends`, `hosted_nodes` and `spmd_nodes` (where the nodes run),
`privacy` (pairwise accounting, target and calibration), `audit` (the one-run canary audit),
`comparison` (epsilon against distance, Fig. 1 of Cyffers et al. ICML 2024) and `report`.

Only `config` is imported here: the scenario schema imports it, and everything else imports the
schema.
"""

from testbed.decentralized.config import ALGORITHMS, DecentralizedConfig

__all__ = ["ALGORITHMS", "DecentralizedConfig"]
