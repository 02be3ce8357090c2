"""Load the dataset a scenario's ``data`` block names, through its `DataSource` (`testbed.data.sources`)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from testbed.data.datasets import BUNDLED_SIZES, Dataset, split_problem
from testbed.data.sources import DataSource, SourceError, build_source
from testbed.errors import ScenarioError


class DataSelection(Protocol):
    """The fields of `testbed.scenario.DataConfig` this module reads (read-only: the config is frozen)."""

    @property
    def dataset(self) -> str: ...

    @property
    def path(self) -> str | None: ...

    @property
    def num_clients(self) -> int: ...

    @property
    def partition(self) -> Any: ...

    @property
    def options(self) -> dict[str, Any]: ...


def source_of(data: DataSelection, source: str | None = None) -> DataSource:
    """The data source the block names, its options checked (``source``: the scenario file, for errors)."""
    try:
        return build_source(data)
    except SourceError as err:
        raise ScenarioError(f"{source}: {err}" if source else str(err)) from None


def check_data_selection(data: DataSelection, source: str) -> None:
    """Refuse an unknown dataset, bad options, or files the source cannot read, from their metadata
    (a table's schema, a folder's listing, an .npz header); and more clients than samples."""
    chosen = source_of(data, source)
    try:
        samples = chosen.check()
    except SourceError as err:
        raise ScenarioError(f"{source}: {err}") from None
    if data.partition.type == "natural" and not chosen.has_owners():
        raise ScenarioError(f"{source}: data.partition.type: dataset '{data.dataset}' names no owners for a natural "
                            "partition; set data.group (table, npz, huggingface) or data.partition.column")
    if samples is not None and samples < data.num_clients:
        raise ScenarioError(f"{source}: data.num_clients: {data.num_clients} clients but {data.path} holds only "
                            f"{samples} samples; use fewer clients or more data")


def check_split(data: DataSelection, test_fraction: float, source: str) -> None:
    """Refuse a test fraction that leaves a side of the split without some class, where the
    dataset's size is known without loading it (a file dataset is checked when it is split)."""
    if data.dataset in BUNDLED_SIZES:
        problem = split_problem(*BUNDLED_SIZES[data.dataset], test_fraction)
        if problem is not None:
            raise ScenarioError(f"{source}: {problem}")


def is_image_data(data: DataSelection) -> bool:
    """Whether the selected dataset is images, from its metadata."""
    try:
        return source_of(data).is_image()
    except (ScenarioError, SourceError):
        return False  # check_data_selection, which runs first, reports what is wrong with the data


def load_selected(data: DataSelection) -> Dataset:
    """The whole dataset (train and test together; the runner splits it)."""
    try:
        return source_of(data).load()
    except SourceError as err:  # a missing or malformed data file, naming its field
        raise ScenarioError(str(err)) from None


def check_file_dataset(data: DataSelection, test_fraction: float, source: str) -> None:
    """Read a file dataset as a run would, and check the split it asks for (a bundled dataset's
    size is known without reading it: `check_split`)."""
    if not source_of(data, source).needs_path:
        return
    try:
        full = load_selected(data)
    except ScenarioError as err:
        raise ScenarioError(f"{source}: {err}") from None
    if full.is_test is None:
        problem = split_problem(len(full.y), len(np.unique(full.y)), test_fraction)
        if problem is not None:
            raise ScenarioError(f"{source}: {problem}")
