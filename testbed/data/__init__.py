"""Datasets that work offline, registered by name in `DATASETS`."""

from testbed.data.datasets import DATASETS, Dataset, load_dataset, train_test_split

__all__ = ["DATASETS", "Dataset", "load_dataset", "train_test_split"]
