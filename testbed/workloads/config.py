"""The ``training:`` block: the loop of a centrally trained workload (``kind: workload``)."""

from __future__ import annotations

from pydantic import Field

from testbed.config import StrictModel


class TrainingConfig(StrictModel):
    """The loop of a centrally trained workload (``kind: workload``)."""

    steps: int = Field(200, gt=0)
    eval_every: int = Field(20, gt=0)
    checkpoint_every: int = Field(50, gt=0)
