"""Load the dataset a scenario's ``data`` block names: a bundled one, or a file dataset at ``path``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from testbed.data.datasets import DATASETS, IMAGE_DATASETS, Dataset
from testbed.data.files import FILE_DATASETS, load_dataset_from
from testbed.errors import ScenarioError


class DataSelection(Protocol):
    """The fields of `testbed.scenario.DataConfig` this module reads."""

    dataset: str
    path: str | None


def check_data_selection(data: DataSelection, source: str) -> None:
    """Refuse an unknown dataset, or a file dataset without a folder."""
    if data.dataset in DATASETS:
        return
    if data.dataset not in FILE_DATASETS:
        valid = ", ".join(sorted(DATASETS) + sorted(FILE_DATASETS))
        raise ScenarioError(f"{source}: data.dataset: unknown dataset '{data.dataset}'; valid: {valid}")
    if data.path is None:
        raise ScenarioError(f"{source}: data.path: dataset '{data.dataset}' is read from local files; set data.path")
    if not Path(data.path).exists():
        raise ScenarioError(f"{source}: data.path: '{data.path}' does not exist")


def is_image_data(data: DataSelection) -> bool:
    """Whether the selected dataset is images (every file dataset is), without loading it."""
    return data.dataset in IMAGE_DATASETS or data.dataset in FILE_DATASETS


def load_selected(data: DataSelection) -> Dataset:
    """The whole dataset (train and test together; the runner splits it)."""
    if data.dataset in DATASETS:
        return DATASETS[data.dataset]()
    return load_dataset_from(data.dataset, Path(data.path))
