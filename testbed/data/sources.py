"""Data sources as components: each kind of data a scenario's ``data.dataset`` can name is one
`DataSource` class that carries its name, its options (a typed config: the data block's other keys)
and how it checks and loads its files. The registry is derived from the classes, and a package adds
its own through the ``testbed.datasets`` entry-point group::

    [project.entry-points."testbed.datasets"]
    my_source = "my_package.data:MySource"   # a DataSource subclass whose ``name`` is "my_source"

A source's `check` reads what it can without loading the data (a table's schema, a folder's
listing, an ``.npz`` header) and returns the number of samples where that is cheap; `load` reads
everything into a `Dataset`. Problems are `SourceError`s naming the ``data.`` field they come from.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed.data.base import DataSource, SourceError
from testbed.data.datasets import BUNDLED_SIZES, DATASETS, IMAGE_DATASETS, Dataset
from testbed.errors import UserError, shorten


def build_source(data: Any) -> DataSource:
    """The source a ``data:`` block names, with its options checked; raises `SourceError`."""
    sources = registered_sources()
    if data.dataset not in sources:
        raise SourceError("dataset", f"unknown dataset {shorten(data.dataset)}; valid: {', '.join(sorted(sources))}")
    cls = sources[data.dataset]
    try:
        options = cls.Config.model_validate(data.options)
    except ValidationError as err:
        raise SourceError(*_option_problem(err, cls, list(getattr(type(data), "model_fields", {})))) from None
    path = _path(data, cls)
    column = getattr(data.partition, "column", None)
    if column is not None and not cls.columns:
        raise SourceError("partition.column", f"dataset '{cls.name}' has no columns; leave it out "
                                              "(the source's own owners are used)")
    return cls(path, options, column or getattr(options, "group", None))


def _option_problem(err: ValidationError, cls: type[DataSource], common: list[str]) -> tuple[str, str]:
    """(field, problem) of the first error in a source's options; an unknown key is matched against
    the source's options and the data block's own keys (``datset`` is a typo of ``dataset``)."""
    errors = err.errors()
    # A misspelt option is both unknown and missing: name the typo, which says what to fix.
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field = ".".join(str(part) for part in first["loc"]) or "dataset"
    if first["type"] == "extra_forbidden":
        from testbed.errors import did_you_mean

        valid = sorted(cls.Config.model_fields)
        hint = did_you_mean(str(first["loc"][0]), valid + common)
        return field, (f"not an option of dataset '{cls.name}'{hint}; its options: {', '.join(valid) or 'none'}")
    return field, f"{first['msg']} (dataset '{cls.name}')"


def _path(data: Any, cls: type[DataSource]) -> Path | None:
    if not cls.needs_path:
        if data.path is not None:
            raise SourceError("path", f"dataset '{cls.name}' is bundled and reads no files; remove data.path")
        return None
    if data.path is None:
        raise SourceError("path", f"dataset '{cls.name}' is read from local files; set data.path")
    path = Path(data.path).expanduser()
    try:
        exists = path.exists()
    except OSError:  # a name the system refuses (too long)
        exists = False
    if not exists:
        raise SourceError("path", f"{shorten(data.path, keep_end=True)} does not exist")
    return path


def describe_options(cls: type[DataSource]) -> str:
    """The options of a source as ``name (type, default)`` for `testbed list datasets`."""
    parts = []
    for key, field in cls.Config.model_fields.items():
        default = "required" if field.is_required() else f"default {field.get_default(call_default_factory=True)!r}"
        parts.append(f"{key} ({default})")
    return "; ".join(parts)


class BundledSource(DataSource):
    """A dataset that ships inside the installed packages (`testbed.data.datasets`)."""

    needs_path = False

    def load(self) -> Dataset:
        return DATASETS[self.name]()


def _bundled(name: str) -> type[DataSource]:
    image = name in IMAGE_DATASETS
    samples, classes = BUNDLED_SIZES[name]
    summary = f"bundled {'images' if image else 'table'}: {samples} samples, {classes} classes"
    cls: type[DataSource] = type(f"Bundled_{name}", (BundledSource,), {
        "name": name, "image": image, "summary": summary, "__doc__": f"The bundled dataset '{name}'."})
    return cls


class Cifar10Source(DataSource):
    """CIFAR-10's official python batches (``data_batch_1..5``, ``test_batch``)."""

    name = "cifar10"
    summary = "CIFAR-10 python batches in a folder (cifar-10-batches-py or its parent); 3x32x32, 10 classes"

    def load(self) -> Dataset:
        from testbed.data.files import load_dataset_from

        return _as_path_error(lambda: load_dataset_from(self.name, self._folder()))

    def _folder(self) -> Path:
        assert self.path is not None  # needs_path: build_source refuses a missing path
        return self.path


class FashionMnistSource(Cifar10Source):
    """Fashion-MNIST's IDX files, plain or gzipped."""

    name = "fashion_mnist"
    summary = "Fashion-MNIST IDX files (train-images-idx3-ubyte ..., plain or .gz) in a folder; 1x28x28, 10 classes"


class FemnistSource(Cifar10Source):
    """FEMNIST from LEAF's JSON shards; each writer is an owner for natural partitions."""

    name = "femnist"
    summary = "FEMNIST LEAF JSON shards (*.json with users, user_data) in a folder; 1x28x28, 62 classes, writers"
    owners = True

    def load(self) -> Dataset:
        import numpy as np

        from testbed.data.files import load_femnist_with_writers

        data, writers = _as_path_error(lambda: load_femnist_with_writers(self._folder()))
        groups = np.empty(len(data.y), dtype=np.int64)
        for owner, index in enumerate(writers):
            groups[index] = owner
        return Dataset(data.name, data.x, data.y, data.num_classes, data.image_shape, groups)


def _as_path_error(load: Any) -> Any:
    try:
        return load()
    except SourceError:
        raise
    except UserError as err:  # the file loaders name the file; the field is data.path
        raise SourceError("path", str(err)) from None


@lru_cache(maxsize=1)
def registered_sources() -> dict[str, type[DataSource]]:
    """Every source by name: the bundled sets, the file formats, then ``testbed.datasets`` plugins."""
    from testbed.data.arrays import NpzSource
    from testbed.data.huggingface import HuggingFaceSource
    from testbed.data.imagefolder import ImageFolderSource
    from testbed.data.tables import TableSource
    from testbed.plugins import load_entry_points

    classes: list[type[DataSource]] = [*(_bundled(name) for name in DATASETS), Cifar10Source, FashionMnistSource,
                                       FemnistSource, TableSource, ImageFolderSource, NpzSource, HuggingFaceSource]
    sources: dict[str, type[DataSource]] = {cls.name: cls for cls in classes}
    load_entry_points("testbed.datasets", sources, DataSource, as_class=True)
    return sources
