"""BiSAM (Xie et al., ICML 2024): sharpness-aware minimisation as a bilevel problem.

`BiSAM` is an optimizer wrapper any workload or federated client can use; `LowerBoundSurrogate`
is the family of lower bounds of the 0-1 loss its perturbation ascends; importing the package
registers the ``bisam`` workload (the digits classifier trained with sgd | sam | bisam).
"""

from testbed.workloads.bisam.optimizer import BiSAM, frozen_batchnorm_statistics
from testbed.workloads.bisam.surrogate import LowerBoundSurrogate, zero_one_loss
from testbed.workloads.bisam.workload import BiSAMConfig, BiSAMWorkload

__all__ = ["BiSAM", "BiSAMConfig", "BiSAMWorkload", "LowerBoundSurrogate", "frozen_batchnorm_statistics",
           "zero_one_loss"]
