"""The smallest complete plugin of each kind the testbed loads, one module each (docs/extending.md).

Installing this package (``pip install examples/plugins``) registers them through its entry points:
strategy ``clipped_mean``, attack ``constant_push``, workload ``softmax_regression``, dataset
``text_table``, tracker ``csv_lines``, engine ``process_pool``, partitioner ``round_robin`` and
topology ``star``.
"""
