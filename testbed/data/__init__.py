"""Datasets that work offline, registered by name in `DATASETS` (bundled) and `FILE_DATASETS`
(local files); client partitions; the unlabelled public set for server-side methods."""

from testbed.data.datasets import DATASETS, Dataset, load_dataset, train_test_split
from testbed.data.files import (
    FILE_DATASETS,
    load_cifar10,
    load_dataset_from,
    load_fashion_mnist,
    load_femnist,
    load_femnist_with_writers,
)
from testbed.data.partition import (
    DirichletPartition,
    IidPartition,
    PartitionConfig,
    PartitionError,
    ShardPartition,
    label_histograms,
    partition_indices,
)
from testbed.data.select import check_data_selection, load_selected
from testbed.data.public import PUBLIC_SETS, PublicDataConfig, augment_views, public_images

__all__ = [
    "DATASETS", "Dataset", "load_dataset", "train_test_split",
    "FILE_DATASETS", "load_cifar10", "load_dataset_from", "load_fashion_mnist", "load_femnist",
    "load_femnist_with_writers",
    "DirichletPartition", "IidPartition", "PartitionConfig", "PartitionError", "ShardPartition", "label_histograms",
    "partition_indices",
    "check_data_selection", "load_selected",
    "PUBLIC_SETS", "PublicDataConfig", "augment_views", "public_images",
]
