"""BiSAM (Xie et al., ICML 2024): sharpness-aware minimisation as a bilevel problem.

``optimizer`` holds `BiSAM`, an optimizer wrapper any workload or federated client can use;
``surrogate`` the family of lower bounds of the 0-1 loss its perturbation ascends
(`LowerBoundSurrogate`); ``config`` the workload's typed config and check (torch-free);
``workload`` the ``bisam`` workload (the digits classifier trained with sgd | sam | bisam, a
`ClassifierWorkload` with another update) and ``report`` its perturbation-profile section.
"""
