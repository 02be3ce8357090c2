"""Datasets that work offline: every source a scenario can name is a `DataSource` class in
`registered_sources()` (bundled sets, file formats, a user's table, image folder, .npz or saved
Hugging Face dataset, ``testbed.datasets`` plugins); client partitions; the unlabelled public set
for server-side methods.

The names below are imported on first use (PEP 562), so that the scenario schema, which needs only
`testbed.data.config`, does not load scikit-learn or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "testbed.data.datasets": ("DATASETS", "Dataset", "load_dataset", "train_test_split"),
    "testbed.data.files": ("FILE_DATASETS", "load_cifar10", "load_dataset_from", "load_fashion_mnist", "load_femnist",
                           "load_femnist_with_writers"),
    "testbed.data.partition": ("DirichletPartition", "IidPartition", "NaturalPartition", "PartitionConfig",
                               "PartitionError", "PathologicalPartition", "ShardPartition", "SizePartition",
                               "label_histograms", "partition_indices"),
    "testbed.data.base": ("DataSource", "SourceError"),
    "testbed.data.sources": ("registered_sources",),
    "testbed.data.select": ("check_data_selection", "load_selected"),
    "testbed.data.public": ("PUBLIC_SETS", "augment_views", "public_images"),
    "testbed.data.config": ("DataConfig", "PublicDataConfig"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'testbed.data' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
