"""The ``image_folder`` source: images in torchvision's ImageFolder layout, ``root/<class>/<file>``,
read with PIL and resized to one size (any size and mode in, ``channels`` x ``image_size`` out).

The classes are the sub-folders in sorted order; files whose suffix is not an image's, and hidden
ones, are skipped. ``test_path`` names a second tree with the same classes as the test split.
Validation lists the folders (an empty class folder is refused) without opening any image; a file
PIL cannot read, or a truncated one, is refused when the data is loaded. Usage::

    data: {dataset: image_folder, path: ~/data/leaves/train, test_path: ~/data/leaves/test, image_size: [32, 32]}
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, PositiveInt

from testbed.config import StrictModel
from testbed.data.base import DataSource, SourceError, encode_labels
from testbed.data.datasets import Dataset

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})


class ImageFolderOptions(StrictModel):
    """The ``data:`` keys of an image folder."""

    image_size: tuple[PositiveInt, PositiveInt] = Field((32, 32), description="height and width of every image")
    channels: Literal[1, 3] = Field(3, description="1: grayscale, 3: RGB")
    test_path: str | None = Field(None, description="a second folder of the same classes: the test split "
                                                    "(default: data.test_fraction of the images)")


class ImageFolderSource(DataSource):
    """A folder of class folders of images (see the module docstring)."""

    name = "image_folder"
    summary = "root/<class>/<image> (ImageFolder layout), any size or mode, resized with PIL"
    Config = ImageFolderOptions
    options: ImageFolderOptions

    def check(self) -> int | None:
        train = self._listing(self._root(), "path")
        test_root = self._test_root()
        if test_root is not None:
            test = self._listing(test_root, "test_path")
            encode_labels(list(train), list(test), "test_path", str(self.path), str(test_root))
        return sum(len(files) for files in train.values())

    def load(self) -> Dataset:
        trees = [self._listing(self._root(), "path")]
        test_root = self._test_root()
        if test_root is not None:
            trees.append(self._listing(test_root, "test_path"))
        files = [[(label, f) for label, names in sorted(tree.items()) for f in names] for tree in trees]
        y, num_classes = encode_labels([label for label, _ in files[0]],
                                       [label for label, _ in files[1]] if len(files) > 1 else None,
                                       "test_path", str(self.path), str(test_root))
        x = np.stack([self._image(f, field) for part, field in zip(files, ("path", "test_path")) for _, f in part])
        is_test = np.repeat([False, True], [len(part) for part in files]) if len(files) > 1 else None
        return Dataset("image_folder", x, y, num_classes, x.shape[1:], None, is_test)

    def _root(self) -> Path:
        assert self.path is not None  # needs_path
        return self.path

    def _test_root(self) -> Path | None:
        if self.options.test_path is None:
            return None
        root = Path(self.options.test_path).expanduser()
        if not root.is_dir():
            raise SourceError("test_path", f"{self.options.test_path}: no such folder")
        return root

    @staticmethod
    def _listing(root: Path, field: str) -> dict[str, list[Path]]:
        """Each class folder's image files, sorted; refuses a file root, no classes or an empty class."""
        if not root.is_dir():
            raise SourceError(field, f"{root}: an image folder is a directory of class folders")
        classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            raise SourceError(field, f"{root}: no class folders; expected {root}/<class>/<image>")
        listing = {}
        for folder in classes:
            images = sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")
                            and f.suffix.lower() in IMAGE_SUFFIXES)
            if not images:
                raise SourceError(field, f"{folder}: class folder '{folder.name}' holds no images "
                                         f"({', '.join(sorted(IMAGE_SUFFIXES))})")
            listing[folder.name] = images
        return listing

    def _image(self, path: Path, field: str) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(path) as image:
                return image_array(image, self.options.image_size, self.options.channels)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise SourceError(field, f"{path}: not a readable image ({err})") from None


def image_array(image: PILImage, size: tuple[int, int], channels: int) -> np.ndarray:
    """A PIL image as float32 [channels, height, width] in [0, 1], resized to ``size`` (height, width)."""
    from PIL import Image

    image = image.convert("L" if channels == 1 else "RGB")
    # LANCZOS widens its kernel with the scale factor: a large photo is antialiased.
    pixels = np.asarray(image.resize((size[1], size[0]), Image.Resampling.LANCZOS), dtype=np.float32)
    pixels = pixels / np.float32(255)
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
