"""The ``classifier`` workload: a small CNN/MLP on a bundled dataset, the testbed's first workload
and the model federated clients train.

``config`` holds its typed config and check (torch-free), ``model`` the network, the batch
stream and the training and evaluation functions (public, so that federated clients train the
same model the same way), ``report`` the confusion-matrix section and ``workload`` the
`ClassifierWorkload` itself.
"""
