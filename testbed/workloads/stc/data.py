"""The delayed-recall task of the STC workload (the sequences are `testbed.data.moving_digits`).

`recall_batch` builds the delayed-recall probe of the temporal pathway: a frame is shown at
t = 0, blank frames follow, a uniform cue frame is shown at t = ``delay``, and the network must
output the first frame at the cue.
"""

from __future__ import annotations

import torch

CUE_LEVEL = 0.5


def recall_batch(first_frames: torch.Tensor, delay: int) -> torch.Tensor:
    """Inputs ``[B, delay + 1, H, W]``: the frame at t = 0, blanks, and the uniform cue at t = ``delay``."""
    batch, height, width = first_frames.shape
    inputs = torch.zeros(batch, delay + 1, height, width, device=first_frames.device)
    inputs[:, 0] = first_frames
    inputs[:, delay] = CUE_LEVEL
    return inputs
