"""Make a computation's floats independent of the process and machine it runs on.

Torch's CPU kernels may split reductions differently with different thread counts, so work that
must give identical numbers on every engine runs with one intra-op thread; numpy's and
scikit-learn's BLAS pools are held to one thread too (threadpoolctl), which also keeps several
workers on one machine from oversubscribing its cores. Parallelism comes from
running many such tasks at once, which is what the engines do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import ThreadpoolController

_controller: tuple[int, ThreadpoolController] | None = None


def _threadpools() -> ThreadpoolController:
    """The process's BLAS/OpenMP pools. Finding them reads /proc/self/maps (3 ms, as long as a
    federated client's whole training step): found again only after new modules were imported,
    which is how a new native library gets loaded."""
    global _controller
    if _controller is None or _controller[0] != len(sys.modules):
        _controller = (len(sys.modules), ThreadpoolController())
    return _controller[1]


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with one torch thread, restoring the previous setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with _threadpools().limit(limits=1):
            yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def numpy_seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded for the block (Flower's DP noise draws from it), then restored."""
    import numpy as np

    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)
