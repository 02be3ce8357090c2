"""The ``npz`` source: a NumPy ``.npz`` archive with features ``x`` and labels ``y`` (and optionally
a test split ``x_test``, ``y_test`` and an owner array), read with ``allow_pickle=False``.

``x`` of shape [N, C, H, W] (or [N, H, W], one channel) is images in [0, 1] (0..255 integers are
scaled); [N, D] is a table, standardised on the training split. Object arrays are refused: loading
one would unpickle, and so run, whatever code the file names. Validation reads only the arrays'
headers (shape and type), never their data, except the labels'. Usage::

    data: {dataset: npz, path: features.npz}
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
from pydantic import Field

from testbed.config import StrictModel
from testbed.data.base import DataSource, SourceError, encode_labels
from testbed.data.datasets import Dataset


class NpzOptions(StrictModel):
    """The ``data:`` keys of an ``.npz`` archive: which arrays hold what."""

    x: str = Field("x", description="the features or images, [N, D], [N, H, W] or [N, C, H, W]")
    y: str = Field("y", description="the labels, [N]")
    x_test: str = Field("x_test", description="the test features, used with y_test where the archive has both")
    y_test: str = Field("y_test", description="the test labels")
    group: str | None = Field(None, description="an [N] array naming each sample's owner (natural partitions)")


class NpzSource(DataSource):
    """An ``.npz`` archive (see the module docstring)."""

    name = "npz"
    summary = "a NumPy .npz with x [N, ...] and y [N] (optionally x_test, y_test, an owner array); no pickles"
    Config = NpzOptions
    image = None
    options: NpzOptions

    def check(self) -> int | None:
        headers = self._headers()
        shape = headers[self.options.x][0]
        self._check_pair(headers, self.options.x, self.options.y)
        if self._has_test(headers):
            self._check_pair(headers, self.options.x_test, self.options.y_test)
            if headers[self.options.x_test][0][1:] != shape[1:]:
                raise SourceError("x_test", f"{self.path}: '{self.options.x_test}' has samples of shape "
                                            f"{headers[self.options.x_test][0][1:]}, '{self.options.x}' {shape[1:]}")
            with np.load(self._file(), allow_pickle=False) as archive:
                encode_labels(archive[self.options.y], archive[self.options.y_test], "y_test", str(self.path),
                              f"{self.path} ({self.options.y_test})")
        return int(shape[0])

    def is_image(self) -> bool:
        return len(self._headers()[self.options.x][0]) in (3, 4)

    def load(self) -> Dataset:
        headers = self._headers()
        test = self._has_test(headers)
        with np.load(self._file(), allow_pickle=False) as archive:
            xs = [archive[self.options.x]] + ([archive[self.options.x_test]] if test else [])
            y, num_classes = encode_labels(archive[self.options.y], archive[self.options.y_test] if test else None,
                                           "y_test", str(self.path), f"{self.path} ({self.options.y_test})")
            groups = self._groups(archive, headers, len(xs[0]), len(xs[1]) if test else 0)
        x = np.concatenate(xs).astype(np.float32)
        image_shape = None
        if x.ndim in (3, 4):
            x = x[:, None] if x.ndim == 3 else x
            image_shape = tuple(int(d) for d in x.shape[1:])
            if np.issubdtype(xs[0].dtype, np.integer):
                x = x / np.float32(255)
        is_test = np.repeat([False, True], [len(xs[0]), len(xs[1])]) if test else None
        return Dataset("npz", x.reshape(len(x), -1) if image_shape is None else x, y, num_classes, image_shape,
                       groups, is_test)

    def _file(self) -> Path:
        assert self.path is not None  # needs_path
        if self.path.is_dir() or not zipfile.is_zipfile(self.path):
            raise SourceError("path", f"{self.path}: not an .npz archive")
        return self.path

    def _headers(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Shape and type of every array, read from the .npy headers inside the archive."""
        headers = {}
        with zipfile.ZipFile(self._file()) as archive:
            for member in archive.namelist():
                with archive.open(member) as stream:
                    try:
                        version = np.lib.format.read_magic(stream)
                        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                else np.lib.format.read_array_header_2_0)
                        shape, _, dtype = read(stream)
                    except ValueError as err:
                        raise SourceError("path", f"{self.path}: {member} is not a NumPy array ({err})") from None
                headers[member.removesuffix(".npy")] = (tuple(shape), np.dtype(dtype))
        for name, (_, dtype) in headers.items():
            if dtype.hasobject:
                raise SourceError("path", f"{self.path}: array '{name}' holds Python objects, which would be "
                                          "unpickled; save numbers (np.savez with numeric arrays)")
        for field in ("x", "y"):
            if getattr(self.options, field) not in headers:
                raise SourceError(field, f"{self.path}: no array '{getattr(self.options, field)}'; arrays: "
                                         f"{', '.join(sorted(headers))}")
        return headers

    def _has_test(self, headers: dict) -> bool:
        return self.options.x_test in headers and self.options.y_test in headers

    def _check_pair(self, headers: dict, x: str, y: str) -> None:
        (x_shape, x_type), (y_shape, y_type) = headers[x], headers[y]
        if len(x_shape) not in (2, 3, 4) or not np.issubdtype(x_type, np.number):
            raise SourceError("x", f"{self.path}: '{x}' must be numbers of shape [N, D], [N, H, W] or [N, C, H, W]; "
                                   f"it is {x_type} {x_shape}")
        if len(y_shape) != 1 or y_shape[0] != x_shape[0] or not np.issubdtype(y_type, np.integer):
            raise SourceError("y", f"{self.path}: '{y}' must be {x_shape[0]} integer labels; it is {y_type} {y_shape}")

    def _groups(self, archive: np.lib.npyio.NpzFile, headers: dict, samples: int, tests: int) -> np.ndarray | None:
        """Owners of the training samples as 0..K-1; the test samples (owned by nobody) are -1."""
        if self.owner_column is None:
            return None
        if self.owner_column not in headers or headers[self.owner_column][0] != (samples,):
            raise SourceError("group", f"{self.path}: no array '{self.owner_column}' of {samples} owners")
        owners = np.unique(archive[self.owner_column], return_inverse=True)[1].astype(np.int64)
        return np.concatenate([owners, np.full(tests, -1, dtype=np.int64)])
