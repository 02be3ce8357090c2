"""The base of every data source (`testbed.data.sources` holds the registry): the `DataSource` class
a source subclasses, the `SourceError` its checks raise, and the label encoding the file sources share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from testbed.config import StrictModel
from testbed.data.datasets import Dataset
from testbed.errors import UserError, shorten


class SourceError(UserError):
    """A problem with a source's data or options: one line that starts with the ``data.`` field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"data.{field}: {message}")
        self.field = field


class NoOptions(StrictModel):
    """The options of a source that has none of its own."""


class DataSource(ABC):
    """One kind of data: its name, options and capabilities on the class, its files on the instance.

    ``columns``: the data has named columns, so ``data.partition.column`` may name the owner one;
    ``owners``: the data names each sample's owner by itself (FEMNIST writers), for natural partitions;
    ``image``: whether the samples are images (None: it depends on the file, see `is_image`).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    Config: ClassVar[type[StrictModel]] = NoOptions
    needs_path: ClassVar[bool] = True
    image: ClassVar[bool | None] = True
    columns: ClassVar[bool] = False
    owners: ClassVar[bool] = False

    def __init__(self, path: Path | None, options: Any, owner_column: str | None = None):
        self.path, self.options, self.owner_column = path, options, owner_column

    def check(self) -> int | None:
        """Refuse data the source cannot read, cheaply; the number of samples where it is cheap."""
        return None

    @abstractmethod
    def load(self) -> Dataset:
        """The whole dataset (with the source's own test split marked in ``is_test``, if it has one)."""

    def is_image(self) -> bool:
        return bool(self.image)

    def has_owners(self) -> bool:
        """Whether each sample has an owner, for natural partitions."""
        return self.owners or self.owner_column is not None


def encode_labels(train: Any, test: Any | None, field: str, where: str, test_where: str | None) -> tuple[Any, int]:
    """Labels (any sortable values) as codes 0..K-1 in sorted order, train then test; the two splits
    must hold the same label set (a class the model never trained on, or never tested, is a mistake)."""
    import numpy as np

    train = np.asarray(train)
    classes = np.unique(train)
    if test is not None:
        test = np.asarray(test)
        only_test, only_train = np.setdiff1d(np.unique(test), classes), np.setdiff1d(classes, np.unique(test))
        if len(only_test) or len(only_train):
            extra, side = (only_test, "test") if len(only_test) else (only_train, "training")
            named = shorten(", ".join(map(str, extra[:5])))
            raise SourceError(field, f"{test_where}: the label sets of the splits differ: {named} only in the {side} "
                                     f"split (training split: {where})")
        train = np.concatenate([train, test])
    return np.searchsorted(classes, train).astype(np.int64), len(classes)
