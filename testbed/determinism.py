"""Make a computation's floats independent of the process and machine it runs on.

Torch's CPU kernels may split reductions differently with different thread counts, so work that
must give identical numbers on every engine runs with one intra-op thread. Parallelism comes from
running many such tasks at once, which is what the engines do.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with one torch thread, restoring the previous setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
