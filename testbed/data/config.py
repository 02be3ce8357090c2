"""The ``data:`` block of a scenario and the public-set block of server-side methods.

Kept free of numpy-heavy and torch imports, so that the scenario schema validates a file without
loading any dataset.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from testbed.config import FiniteValue, StrictModel
from testbed.data.partition import IidPartition, PartitionConfig

# The most copies `replicate` makes (the replicated split is also bounded in bytes where it is built).
MAX_REPLICATE = 1000


class DataConfig(StrictModel):
    """Which dataset a run uses, how it is split into train and test, and over how many clients.

    The other keys are the options of the source ``dataset`` names (a table's ``label``, an image
    folder's ``image_size``): `testbed.data.select` checks them against that source's own config,
    so a typo there is reported with its path like any other key.
    """

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, FiniteValue] = Field(init=False)

    dataset: str = "digits"
    path: str | None = Field(None, description="the file or folder of a file source (table, image_folder, npz, "
                                               "huggingface, cifar10, fashion_mnist, femnist)")
    test_fraction: float = Field(0.25, gt=0, lt=1)
    num_clients: int = Field(1, gt=0, description="clients (federated) or nodes (decentralized)")
    partition: PartitionConfig = Field(default_factory=IidPartition)
    replicate: int = Field(1, gt=0, le=MAX_REPLICATE,
                           description="repeat the training split k times before partitioning, "
                                       "so scale tests can have more clients than samples")

    @property
    def options(self) -> dict[str, Any]:
        """The source-specific keys."""
        return dict(self.model_extra or {})


class PublicDataConfig(StrictModel):
    """The server's unlabelled public set: where its images come from and how many."""

    source: Literal["sample_images", "noise", "typeset"] = Field(
        "sample_images", description="sample_images: crops of scikit-learn's photographs; typeset: digits and "
                                     "letters in Computer Modern (a finite pool); noise: uniform noise")
    size: int = Field(512, gt=0, description="number of public images")
