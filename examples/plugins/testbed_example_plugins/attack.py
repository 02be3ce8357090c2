"""Attack ``constant_push``: every Byzantine client uploads the same large constant update."""

from __future__ import annotations

import torch
from torch import Generator, Tensor

from testbed.strategies import attack


# kind "model": the function rewrites the Byzantine uploads on the server, as
# fn(malicious, benign, generator, **params); the decorator makes it an Attack named constant_push.
@attack("model")
def constant_push(malicious: Tensor, benign: Tensor, generator: Generator | None = None, *,
                  value: float = 1.0) -> Tensor:
    """Example plugin: each Byzantine upload becomes ``value`` in every coordinate.

    ``malicious`` holds the ``[m, d]`` updates those clients would have sent. A scenario sets
    ``value`` in ``federated.attack``; its type and default come from this signature.
    """
    if value == 0:
        raise ValueError("value: must not be 0 (that is no attack)")
    return torch.full_like(malicious, value)
