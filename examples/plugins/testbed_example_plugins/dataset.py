"""Dataset source ``text_table``: a plain-text table of numbers, one sample per line, the label last."""

from __future__ import annotations

import numpy as np

from testbed.config import StrictModel
from testbed.data.base import DataSource, SourceError, encode_labels
from testbed.data.datasets import Dataset


class TextTableOptions(StrictModel):
    """The keys of ``data:`` this source reads besides ``dataset`` and ``path``."""

    delimiter: str | None = None  # None: any whitespace


class TextTableSource(DataSource):
    """``data: {dataset: text_table, path: samples.txt}``: features first, the class label last."""

    name = "text_table"
    summary = "example plugin: a text file of numbers, one sample per line, label last"
    Config = TextTableOptions
    image = False

    def check(self) -> int:
        """The sample count, from the line count, without parsing (validation calls this)."""
        assert self.path is not None  # needs_path: the testbed refuses a scenario without data.path
        if not self.path.is_file():
            raise SourceError("path", f"{self.path} is not a file")
        with self.path.open() as lines:
            return sum(1 for line in lines if line.strip())

    def load(self) -> Dataset:
        assert self.path is not None
        try:
            table = np.loadtxt(self.path, delimiter=self.options.delimiter, ndmin=2)
        except ValueError as err:  # a word where a number should be, or rows of different lengths
            raise SourceError("path", f"{self.path}: {err}") from None
        if table.shape[1] < 2:
            raise SourceError("path", f"{self.path}: needs a feature column and a label column")
        labels, num_classes = encode_labels(table[:, -1], None, "path", str(self.path), None)
        return Dataset(self.name, table[:, :-1].astype(np.float32), labels, num_classes, image_shape=None)
