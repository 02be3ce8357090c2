"""The ``table`` source: a CSV or Parquet file with a label column and feature columns, read with
pyarrow.

Numeric (and boolean) columns are features as they are; columns listed in ``categorical`` become
one 0/1 column per category, with the categories of the training split only (`train_test_split`);
a text column that is not declared categorical is refused, rather than silently dropped. The
optional ``group`` column names each row's owner, for ``partition: {type: natural}``. Usage::

    data: {dataset: table, path: patients.parquet, label: outcome, categorical: [site], group: hospital}
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from testbed.config import StrictModel
from testbed.data.base import DataSource, SourceError, encode_labels
from testbed.data.datasets import Dataset

if TYPE_CHECKING:
    import pyarrow as pa

SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class TableOptions(StrictModel):
    """The ``data:`` keys of a table."""

    label: str = Field(description="the column of the class labels (numbers or text)")
    features: list[str] | None = Field(None, description="the feature columns; default: every column but the "
                                                         "label and owner ones")
    categorical: list[str] = Field(default_factory=list, description="columns one-hot encoded on the training split")
    group: str | None = Field(None, description="the column naming each row's owner (natural partitions)")
    test_path: str | None = Field(None, description="a second file with the same columns: the test split "
                                                    "(default: data.test_fraction of the rows)")


class TableSource(DataSource):
    """A CSV or Parquet table (see the module docstring)."""

    name = "table"
    summary = "a CSV or Parquet file: a label column, numeric and categorical feature columns, an owner column"
    Config = TableOptions
    image = False
    columns = True
    options: TableOptions

    def check(self) -> int | None:
        assert self.path is not None  # needs_path
        schema = _schema(self.path)
        self._feature_columns(schema)
        test = self._test_path()
        if test is not None:
            missing = sorted(set(schema.names) - set(_schema(test).names))
            if missing:
                raise SourceError("test_path", f"{test}: columns {', '.join(missing)} of {self.path} are missing")
            encode_labels(self._labels(self.path), self._labels(test), "test_path", str(self.path), str(test))
        return _read(self.path, [self.options.label]).num_rows

    def load(self) -> Dataset:
        assert self.path is not None  # needs_path
        parts = [_read(self.path)]
        test = self._test_path()
        if test is not None:
            parts.append(_read(test, parts[0].schema.names))
        numeric, categorical = self._feature_columns(parts[0].schema)
        y, num_classes = encode_labels(self._column(parts[0], self.options.label, self.path),
                                       self._column(parts[1], self.options.label, test) if test else None,
                                       "test_path", str(self.path), str(test))
        wheres = (self.path, test)
        x = np.concatenate([self._numeric(part, numeric, where) for part, where in zip(parts, wheres)])
        codes = np.stack([_codes(np.concatenate([self._column(p, c, None) for p in parts])) for c in categorical],
                         axis=1) if categorical else None
        owners = [self._column(p, self.owner_column, w, "group") for p, w in zip(parts, wheres)] \
            if self.owner_column else None
        groups = _codes(np.concatenate(owners)) if owners else None
        is_test = np.repeat([False, True], [len(p) for p in parts]) if test else None
        return Dataset("table", x, y, num_classes, None, groups, is_test, codes)

    def _test_path(self) -> Path | None:
        if self.options.test_path is None:
            return None
        test = Path(self.options.test_path).expanduser()
        if not test.is_file():
            raise SourceError("test_path", f"{self.options.test_path} does not exist")
        return test

    def _feature_columns(self, schema: pa.Schema) -> tuple[list[str], list[str]]:
        """(numeric, categorical) feature columns; refuses a missing or non-numeric undeclared one."""
        import pyarrow as pa

        options, names = self.options, set(schema.names)
        for field, columns in (("label", [options.label]), ("group", [options.group]),
                               ("partition.column", [self.owner_column]), ("features", options.features or []),
                               ("categorical", options.categorical)):
            for column in columns:
                if column is not None and column not in names:
                    raise SourceError(field, f"{self.path}: no column '{column}'; columns: {', '.join(schema.names)}")
        reserved = {options.label, options.group, self.owner_column}
        features = options.features or [n for n in schema.names if n not in reserved]
        categorical = [c for c in features if c in options.categorical]
        numeric = [c for c in features if c not in options.categorical]
        for column in numeric:
            kind = schema.field(column).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
                raise SourceError("categorical", f"{self.path}: feature column '{column}' holds {kind}, not numbers; "
                                                 "list it in data.categorical or leave it out of data.features")
        if not features:
            raise SourceError("features", f"{self.path}: no feature columns besides the label")
        return numeric, categorical

    def _labels(self, path: Path) -> np.ndarray:
        return self._column(_read(path, [self.options.label]), self.options.label, path)

    @staticmethod
    def _column(table: pa.Table, column: Any, where: Path | None, field: str = "label") -> np.ndarray:
        values = table.column(column)
        if where is not None and values.null_count:
            raise SourceError(field, f"{where}: column '{column}' has {values.null_count} empty cells")
        return np.asarray(values.to_pylist() if values.null_count else values.to_numpy(zero_copy_only=False))

    @staticmethod
    def _numeric(table: pa.Table, columns: list[str], where: Path | None) -> np.ndarray:
        if not columns:
            return np.zeros((table.num_rows, 0), dtype=np.float32)
        x = np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float32) for c in columns], axis=1)
        if not np.isfinite(x).all():
            row, col = np.argwhere(~np.isfinite(x))[0]
            raise SourceError("features", f"{where}: column '{columns[col]}' row {row + 1} is empty or not finite")
        return x


def _codes(values: np.ndarray) -> np.ndarray:
    """Values as codes 0..K-1 in sorted order of their text; a missing value (None) is -1."""
    missing = np.array([v is None for v in values], dtype=bool)
    text = np.array([str(v) for v in values], dtype=object)
    codes = np.full(len(values), -1, dtype=np.int64)
    if (~missing).any():
        codes[~missing] = np.unique(text[~missing], return_inverse=True)[1]
    return codes


def _format(path: Path) -> str:
    if path.is_dir() or path.suffix.lower() not in SUFFIXES:
        raise SourceError("path", f"{path}: a table is a .csv or .parquet file")
    return SUFFIXES[path.suffix.lower()]


def _schema(path: Path) -> pa.Schema:
    """The columns and their types, from the Parquet footer or the first block of a CSV."""
    import pyarrow as pa
    from pyarrow import csv, parquet

    try:
        if _format(path) == "parquet":
            return parquet.read_schema(path)
        with csv.open_csv(path) as reader:
            return reader.schema
    except (pa.ArrowException, OSError) as err:
        raise SourceError("path", f"{path}: cannot be read as a table ({_first_line(err)})") from None


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    import pyarrow as pa
    from pyarrow import csv, parquet

    try:
        if _format(path) == "parquet":
            return parquet.read_table(path, columns=columns)
        return csv.read_csv(path, convert_options=csv.ConvertOptions(include_columns=columns))
    except (pa.ArrowException, OSError) as err:
        raise SourceError("path", f"{path}: cannot be read as a table ({_first_line(err)})") from None


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
