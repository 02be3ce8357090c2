"""ACO (Valancius, Lennon, Oliva, ICML 2024): the acquisition conditioned oracle for non-greedy
active feature acquisition, its greedy and random baselines, and the ``aco`` workload."""

from testbed.workloads.aco.policy import AcquisitionSettings, NeighbourOracle, candidate_masks, rollout
from testbed.workloads.aco.workload import ACOConfig, ACOWorkload

__all__ = ["ACOConfig", "ACOWorkload", "AcquisitionSettings", "NeighbourOracle", "candidate_masks", "rollout"]
