"""ACO (Valancius, Lennon, Oliva, ICML 2024): the acquisition conditioned oracle for non-greedy
active feature acquisition, its greedy and random baselines, and the ``aco`` workload.

``config`` holds the workload's typed config and check (torch-free), ``data`` the synthetic and
tabular sets, ``masked`` the arbitrary-subset classifier, ``policy`` the oracle and the
acquisition policies, ``metrics`` their roll-outs and scores, ``report`` the report sections and
``workload`` the `ACOWorkload`.
"""
