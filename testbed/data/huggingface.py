"""The ``huggingface`` source: a Hugging Face ``datasets`` dataset saved with ``save_to_disk`` (a
``Dataset`` or a ``DatasetDict`` of splits), read offline with ``datasets.load_from_disk``.

The inputs are one ``Image`` column (resized like an image folder's) or numeric columns (a table);
the labels a ``ClassLabel`` or any column of numbers or text. Of a ``DatasetDict``, ``split`` is the
training split and ``test_split``, where the dict has it, the test split. ``datasets`` is an extra:
``pip install 'testbed[hf]'``. Usage::

    data: {dataset: huggingface, path: ~/data/beans_saved, label: labels, image_size: [64, 64]}
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, PositiveInt

from testbed.config import StrictModel
from testbed.data.base import DataSource, SourceError, encode_labels
from testbed.data.datasets import Dataset

EXTRA = "pip install 'testbed[hf]'"


class HuggingFaceOptions(StrictModel):
    """The ``data:`` keys of a saved Hugging Face dataset."""

    label: str = Field("label", description="the label column")
    inputs: list[str] | None = Field(None, description="the input columns; default: the Image column if there is "
                                                       "one, else every numeric column but the label and owner")
    split: str = Field("train", description="the training split of a DatasetDict")
    test_split: str | None = Field("test", description="the test split of a DatasetDict, where it has one "
                                                       "(otherwise data.test_fraction of the training split)")
    group: str | None = Field(None, description="the column naming each sample's owner (natural partitions)")
    image_size: tuple[PositiveInt, PositiveInt] = Field((32, 32), description="height, width of resized images")
    channels: Literal[1, 3] = Field(3, description="1: grayscale, 3: RGB")


class HuggingFaceSource(DataSource):
    """A dataset saved with ``save_to_disk`` (see the module docstring)."""

    name = "huggingface"
    summary = f"a Hugging Face dataset saved with save_to_disk: an Image or numeric columns, a label ({EXTRA})"
    Config = HuggingFaceOptions
    image = None
    columns = True
    options: HuggingFaceOptions

    def check(self) -> int | None:
        splits = self._splits()
        self._inputs(splits[0])
        if len(splits) > 1:
            encode_labels(splits[0][self.options.label], splits[1][self.options.label], "test_split",
                          f"{self.path} ({self.options.split})", f"{self.path} ({self.options.test_split})")
        return len(splits[0])

    def is_image(self) -> bool:
        return self._inputs(self._splits()[0])[1]

    def load(self) -> Dataset:
        splits = self._splits()
        columns, image = self._inputs(splits[0])
        test = splits[1][self.options.label] if len(splits) > 1 else None
        where, test_where = f"{self.path} ({self.options.split})", f"{self.path} ({self.options.test_split})"
        y, num_classes = encode_labels(splits[0][self.options.label], test, "test_split", where, test_where)
        x = np.concatenate([self._features(split, columns, image) for split in splits])
        groups = None
        if self.owner_column is not None:
            owners = np.concatenate([np.asarray(split[self.owner_column]).astype(str) for split in splits])
            groups = np.unique(owners, return_inverse=True)[1].astype(np.int64)
        is_test = np.repeat([False, True], [len(s) for s in splits]) if len(splits) > 1 else None
        return Dataset("huggingface", x, y, num_classes, x.shape[1:] if image else None, groups, is_test)

    def _splits(self) -> list[Any]:
        """The training split, and the test split where the saved dict has one."""
        try:
            import datasets
        except ImportError:
            raise SourceError("dataset", f"'huggingface' reads saved datasets with the datasets package: {EXTRA}") \
                from None
        try:
            saved = datasets.load_from_disk(str(self.path))
        except (FileNotFoundError, ValueError, OSError) as err:
            raise SourceError("path", f"{self.path}: not a dataset saved with save_to_disk ({err})") from None
        if not isinstance(saved, datasets.DatasetDict):
            return [saved]
        if self.options.split not in saved:
            raise SourceError("split", f"{self.path}: no split '{self.options.split}'; splits: {', '.join(saved)}")
        test = self.options.test_split
        return [saved[self.options.split]] + ([saved[test]] if test is not None and test in saved else [])

    def _inputs(self, split: Any) -> tuple[list[str], bool]:
        """The input columns and whether they are one image column; refuses missing or non-numeric ones."""
        import datasets

        features, options = split.features, self.options
        for field, column in (("label", options.label), ("group", self.owner_column)):
            if column is not None and column not in features:
                raise SourceError(field, f"{self.path}: no column '{column}'; columns: {', '.join(features)}")
        images = [name for name, kind in features.items() if isinstance(kind, datasets.Image)]
        reserved = {options.label, self.owner_column}
        columns = options.inputs or (images[:1] or [n for n in features if n not in reserved])
        for column in columns:
            kind = features.get(column)
            if kind is None:
                raise SourceError("inputs", f"{self.path}: no column '{column}'; columns: {', '.join(features)}")
            numeric = isinstance(kind, datasets.Value) and (kind.dtype.startswith(("int", "uint", "float", "bool")))
            if not (numeric or isinstance(kind, datasets.Image)):
                raise SourceError("inputs", f"{self.path}: column '{column}' is {kind}, neither numbers nor an Image")
        image = isinstance(features[columns[0]], datasets.Image)
        if image and len(columns) > 1:
            raise SourceError("inputs", f"{self.path}: an Image column must be the only input, not {columns}")
        return columns, image

    def _features(self, split: Any, columns: list[str], image: bool) -> np.ndarray:
        if not image:
            return np.stack([np.asarray(split[c], dtype=np.float32) for c in columns], axis=1)
        from testbed.data.imagefolder import image_array

        size, channels = self.options.image_size, self.options.channels
        try:
            return np.stack([image_array(picture, size, channels) for picture in split[columns[0]]])
        except (OSError, SyntaxError, ValueError) as err:  # PIL's errors for an unreadable or truncated image
            raise SourceError("path", f"{self.path}: column '{columns[0]}' holds an unreadable image ({err})") \
                from None

