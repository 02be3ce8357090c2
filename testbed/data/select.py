"""Load the dataset a scenario's ``data`` block names: a bundled one, or a file dataset at ``path``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from testbed.data.datasets import BUNDLED_SIZES, DATASETS, IMAGE_DATASETS, Dataset, split_problem
from testbed.data.files import FILE_DATASETS, load_dataset_from
from testbed.errors import ScenarioError, UserError, shorten


class DataSelection(Protocol):
    """The fields of `testbed.scenario.DataConfig` this module reads (read-only: the config is frozen)."""

    @property
    def dataset(self) -> str: ...

    @property
    def path(self) -> str | None: ...


def check_data_selection(data: DataSelection, source: str) -> None:
    """Refuse an unknown dataset, or a file dataset without a folder."""
    if data.dataset in DATASETS:
        return
    if data.dataset not in FILE_DATASETS:
        valid = ", ".join(sorted(DATASETS) + sorted(FILE_DATASETS))
        raise ScenarioError(f"{source}: data.dataset: unknown dataset {shorten(data.dataset)}; valid: {valid}")
    if data.path is None:
        raise ScenarioError(f"{source}: data.path: dataset '{data.dataset}' is read from local files; set data.path")
    try:
        exists = Path(data.path).exists()
    except OSError:  # a name the system refuses (too long)
        exists = False
    if not exists:
        raise ScenarioError(f"{source}: data.path: {shorten(data.path)} does not exist")


def check_split(data: DataSelection, test_fraction: float, source: str) -> None:
    """Refuse a test fraction that leaves a side of the split without some class, where the
    dataset's size is known without loading it (a file dataset is checked when it is split)."""
    if data.dataset in BUNDLED_SIZES:
        problem = split_problem(*BUNDLED_SIZES[data.dataset], test_fraction)
        if problem is not None:
            raise ScenarioError(f"{source}: {problem}")


def is_image_data(data: DataSelection) -> bool:
    """Whether the selected dataset is images (every file dataset is), without loading it."""
    return data.dataset in IMAGE_DATASETS or data.dataset in FILE_DATASETS


def load_selected(data: DataSelection) -> Dataset:
    """The whole dataset (train and test together; the runner splits it)."""
    if data.dataset in DATASETS:
        return DATASETS[data.dataset]()
    assert data.path is not None  # check_data_selection refuses a file dataset without a folder
    try:
        return load_dataset_from(data.dataset, Path(data.path))
    except ScenarioError:
        raise
    except UserError as err:  # a missing or malformed data file: name the field that points at it
        raise ScenarioError(f"data.path: {err}") from None


def check_file_dataset(data: DataSelection, test_fraction: float, source: str) -> None:
    """Read a file dataset as a run would, and check the split it asks for (a bundled dataset's
    size is known without reading it: `check_split`)."""
    if data.dataset in DATASETS or data.path is None:
        return
    try:
        full = load_selected(data)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None
    problem = split_problem(len(full.y), len(np.unique(full.y)), test_fraction)
    if problem is not None:
        raise ScenarioError(f"{source}: {problem}")
