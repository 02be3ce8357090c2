"""Glyphs: a bundled, offline 36-class image set of typeset digits and uppercase letters.

SDEA's robustness claim needs clients whose data is more than scikit-learn's 1797 digits and a
server public set from a *related* domain: the same kind of images in a style the clients never
see. No second handwritten set ships offline here, so both are made from the fonts that ship with
matplotlib. ``glyphs`` (the bundled dataset ``glyphs`` of `testbed.data.DATASETS`) is 28x28
grayscale images of "0".."9" and "A".."Z" in the 16 DejaVu (Sans, Sans Mono, Serif) and STIX faces,
regular, bold, oblique/italic; the five Computer Modern faces (`HELD_OUT_FONTS`) are kept out of it,
for SDEA's public source ``typeset`` (`testbed.data.public`).

How an image is made (`render`): the glyph is rendered once per (font, character) with FreeType
(`glyph_bitmap`) and turned into a signed distance field, inside positive (`_glyph_field`); each
image samples that field through a random affine map (`draw_distortions`: rotation within +-15
degrees, shear within +-0.25, scale 0.8-1.1, translation within +-2 px) on a 3x supersampled grid,
thickens or thins the strokes by shifting the field (-0.3..+0.9 px each side), and averages the
grid down, so the edges are anti-aliased. As in MNIST, an undistorted glyph's larger side is 20 of
the 28 pixels, centred.

The set is fixed (``DATA_SEED``), like the other bundled sets: a scenario's seed only splits and
partitions it. It holds ``PER_CLASS`` = 200 images per class (7200 in all, 22.6 MB as float32):
enough that a 25% test split keeps 50 per class and that each of 10-20 federated clients gets a
few hundred images, while generating in 2.4-3.3 s on one core (measured on a busy machine); it is
made once per process.
"""

from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

CHARACTERS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # class k is CHARACTERS[k]
DATASET_FONTS = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
)
# Computer Modern roman, bold, sans, typewriter, italic: never in the dataset, they are SDEA's public domain.
HELD_OUT_FONTS = ("cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf")
SIDE = 28
PER_CLASS = 200
DATA_SEED = 2036  # the dataset is fixed: it never depends on a run's seed
RENDER_POINTS = 64  # FreeType size of the master glyph (at 72 dpi: about 47 px cap height)
FILL = 20 / 28  # an undistorted glyph's larger side, as a fraction of the image's smaller side (MNIST's)
SUPERSAMPLE = 3
_MARGIN = 4  # empty master-glyph pixels around the ink, so the field is defined past the strokes


_FONT_LOCK = threading.Lock()  # an FT2Font holds its text and bitmap: one rendering at a time


@cache
def _font(font_file: str, points: int) -> Any:
    """matplotlib's FreeType face of ``font_file`` at ``points`` (kept: the first text set on a face is slow)."""
    import matplotlib
    from matplotlib.ft2font import FT2Font

    font = FT2Font(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / font_file))
    font.set_size(points, 72)
    return font


@cache
def glyph_bitmap(font_file: str, character: str, points: int = RENDER_POINTS) -> np.ndarray:
    """The anti-aliased glyph of ``character`` in one of matplotlib's bundled fonts, values in [0, 1].

    The array is shared by every caller (cached): copy it before changing it.
    """
    with _FONT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        font = _font(font_file, points)
        font.set_text(character, 0.0)
        font.draw_glyphs_to_bitmap()
        return np.asarray(font.get_image(), dtype=np.float64) / 255.0


def optdigits_8x8(ink: np.ndarray) -> np.ndarray:
    """The optdigits conversion: bounding box -> 32x32 bitmap (aspect kept, centred) -> 4x4 block counts / 16."""
    from scipy import ndimage  # imported on use: validating a scenario never renders

    rows, cols = np.nonzero(ink > 0.5)
    if len(rows) == 0:
        return np.zeros((8, 8), dtype=np.float32)
    box = ink[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    scale = 32.0 / max(box.shape)
    scaled = ndimage.zoom(box, scale, order=1) > 0.5
    height, width = min(scaled.shape[0], 32), min(scaled.shape[1], 32)
    bitmap = np.zeros((32, 32), dtype=np.float32)
    top, left = (32 - height) // 2, (32 - width) // 2
    bitmap[top : top + height, left : left + width] = scaled[:height, :width]
    return bitmap.reshape(8, 4, 8, 4).sum(axis=(1, 3)) / 16.0


@dataclass(frozen=True)
class Distortion:
    """One random variation of a glyph; lengths are in pixels of a 28x28 image (`render` rescales them)."""

    rotation: float = 0.0  # degrees, counter-clockwise
    shear: float = 0.0  # horizontal shear factor
    scale: float = 1.0
    shift: tuple[float, float] = (0.0, 0.0)  # (down, right)
    stroke: float = 0.0  # added to each side of every stroke; negative thins


# The ranges of `draw_distortions`: rotation, shear, scale, shift down, shift right, stroke.
DISTORTION_LOW = (-15.0, -0.25, 0.8, -2.0, -2.0, -0.3)
DISTORTION_HIGH = (15.0, 0.25, 1.1, 2.0, 2.0, 0.9)


def draw_distortions(count: int, rng: np.random.Generator) -> list[Distortion]:
    """``count`` random `Distortion`s, uniform in rotation +-15 deg, shear +-0.25, scale 0.8-1.1,
    shift +-2 px each way and stroke -0.3..+0.9 px."""
    draws = rng.uniform(DISTORTION_LOW, DISTORTION_HIGH, size=(count, len(DISTORTION_LOW)))
    return [Distortion(float(rotation), float(shear), float(scale), (float(down), float(right)), float(stroke))
            for rotation, shear, scale, down, right, stroke in draws]


@cache
def _glyph_field(font_file: str, character: str) -> tuple[np.ndarray, int]:
    """The glyph's signed distance field in master pixels (ink > 0, edge at 0), cropped to the ink
    plus a margin, and the ink's larger side."""
    from scipy import ndimage  # imported on use: validating a scenario never renders

    ink = glyph_bitmap(font_file, character) > 0.5
    rows, cols = np.nonzero(ink)
    if len(rows) == 0:
        raise ValueError(f"font {font_file} has no glyph for {character!r}")
    ink = np.pad(ink[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1], _MARGIN)
    field = np.where(ink, ndimage.distance_transform_edt(ink) - 0.5, 0.5 - ndimage.distance_transform_edt(~ink))
    return field, int(max(rows.max() - rows.min(), cols.max() - cols.min()) + 1)


def render(font_file: str, character: str, height: int = SIDE, width: int = SIDE,
           distortion: Distortion = Distortion()) -> np.ndarray:
    """``character`` in ``font_file``, distorted, as a float32 [height, width] image in [0, 1] (ink is 1)."""
    from scipy import ndimage  # imported on use: validating a scenario never renders

    field, box = _glyph_field(font_file, character)
    unit = min(height, width) / SIDE  # the distortion's pixels are 28x28 pixels
    fine = SUPERSAMPLE * FILL * min(height, width) / box  # supersampled pixels per master pixel
    angle = math.radians(distortion.rotation)
    cos, sin = math.cos(angle), math.sin(angle)
    # (row, column) coordinates: the forward map rotates, shears and scales about the glyph's
    # centre; affine_transform wants the inverse, from output to master pixels.
    rotate, shear = np.array([[cos, sin], [-sin, cos]]), np.array([[1.0, 0.0], [-distortion.shear, 1.0]])
    forward = distortion.scale * fine * rotate @ shear
    inverse = np.linalg.inv(forward)
    out_centre = np.array([SUPERSAMPLE * height - 1, SUPERSAMPLE * width - 1]) / 2.0
    out_centre += SUPERSAMPLE * unit * np.asarray(distortion.shift)
    offset = (np.array(field.shape) - 1) / 2.0 - inverse @ out_centre
    sampled = ndimage.affine_transform(field, inverse, offset, output_shape=(SUPERSAMPLE * height, SUPERSAMPLE * width),
                                       order=1, cval=-1e3, prefilter=False)
    # The field is in master pixels: scaled to supersampled pixels, a one-pixel ramp anti-aliases the edge.
    ink = np.clip(0.5 + sampled * (distortion.scale * fine) + distortion.stroke * unit * SUPERSAMPLE, 0.0, 1.0)
    return ink.reshape(height, SUPERSAMPLE, width, SUPERSAMPLE).mean(axis=(1, 3)).astype(np.float32)


def make_glyphs(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``per_class`` distorted images of each of the 36 characters, each class cycling through the fonts.

    Returns images float32 [n, 1, 28, 28] in [0, 1], labels int64 [n] (index into `CHARACTERS`) and
    the font of each image, int64 [n] (index into `DATASET_FONTS`). The images come in rounds of one
    per class, and a smaller ``per_class`` gives the first rounds of a larger one.
    """
    font_rng, distortion_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    classes, faces = len(CHARACTERS), len(DATASET_FONTS)
    # Each class takes the fonts in random orders, a whole cycle at a time, so every font is about as
    # frequent in every class; the cycles are drawn for all classes in turn, so rounds do not shift.
    cycles = np.array([[font_rng.permutation(faces) for _ in range(classes)] for _ in range(-(-per_class // faces))])
    fonts = cycles.transpose(1, 0, 2).reshape(classes, -1)[:, :per_class].T.reshape(-1)  # round-major, like labels
    labels = np.tile(np.arange(classes), per_class)
    images = np.empty((len(labels), 1, SIDE, SIDE), dtype=np.float32)
    for i, (label, font, distortion) in enumerate(zip(labels, fonts, draw_distortions(len(labels), distortion_rng))):
        images[i, 0] = render(DATASET_FONTS[font], CHARACTERS[label], distortion=distortion)
    return images, labels.astype(np.int64), fonts.astype(np.int64)


@cache
def glyph_images() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``glyphs`` dataset (``PER_CLASS`` images per class, seed ``DATA_SEED``) with each image's
    font, made once per process or read from the dataset cache (`cached_glyphs`). The arrays are
    shared and read-only: `testbed.data.datasets` hands out copies.
    """
    arrays = cached_glyphs()
    for array in arrays:
        array.flags.writeable = False
    return arrays


# The fonts and FreeType that render the images ship with matplotlib.
RENDERING_LIBRARIES = ("numpy", "matplotlib")
GLYPH_CACHE_ENV = "TESTBED_DATASET_CACHE"


def cached_glyphs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`make_glyphs` (``PER_CLASS``, ``DATA_SEED``) through the dataset cache (`testbed.cache`):
    rendering takes 2-3 s on one core, and every process of a federated run (the driver and each
    client actor) loads the set, so the images are kept under a key of this module's source and the
    rendering libraries' versions, and read back in milliseconds. ``TESTBED_DATASET_CACHE=off``
    renders them every time; the arrays are the same either way."""
    from testbed.cache import cache_root, read_arrays, source_digest, write_arrays

    root = cache_root("datasets", GLYPH_CACHE_ENV)
    n = PER_CLASS * len(CHARACTERS)
    expected = {"images": ("float32", (n, 1, SIDE, SIDE)), "labels": ("int64", (n,)), "fonts": ("int64", (n,))}
    path = None if root is None else root / f"glyphs-{source_digest([Path(__file__)], RENDERING_LIBRARIES)[:32]}.npz"
    found = None if path is None else read_arrays(path, expected)
    if found is not None:
        return found["images"], found["labels"], found["fonts"]
    images, labels, fonts = make_glyphs(PER_CLASS, DATA_SEED)
    if path is not None:
        write_arrays(path, {"images": images, "labels": labels, "fonts": fonts})
    return images, labels, fonts
