"""A second real digit source, offline: typeset digits in the fonts that ship with matplotlib.

OODRobustBench's natural dataset shifts are new test sets of the same classes collected another
way (CIFAR-10.1, CINIC-10, ImageNet-V2/-R). No second *handwritten* digit set ships offline in
this environment (no MNIST sample in any installed package; see docs/reproduction/oodrobust.md),
so the natural shift here is the digit glyphs of 21 real typefaces (DejaVu Sans/Serif/Mono, STIX,
Computer Modern; regular, bold, italic) with the variation of a hand-held pen imitated by a small
random rotation, width and stroke thickness, converted exactly as scikit-learn's digits were made
(the UCI optdigits preprocessing: the digit's bounding box scaled to a 32x32 bitmap, then the
number of ink pixels counted in each 4x4 block, 0..16, here divided by 16). The renderer and the
conversion are `testbed.data.glyphs`', which also makes the bundled ``glyphs`` dataset.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from testbed.data.glyphs import glyph_bitmap as render_glyph
from testbed.data.glyphs import optdigits_8x8

FONT_FILES = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSansMono-Oblique.ttf", "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
    "cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf", "cmti10.ttf",
)
RENDER_POINTS = 64


def glyph_bitmap(font_file: str, digit: int) -> np.ndarray:
    """The anti-aliased glyph of ``digit`` in one of matplotlib's bundled fonts, values in [0, 1] (cached, shared)."""
    return render_glyph(font_file, str(digit), RENDER_POINTS)


def handwritten_jitter(glyph: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A pen-like variation of a glyph: rotation within +-10 degrees, width 80-115%, thicker strokes."""
    ink = ndimage.rotate(glyph, rng.uniform(-10, 10), reshape=True, order=1)
    ink = ndimage.zoom(ink, (1.0, rng.uniform(0.8, 1.15)), order=1)
    thickening = int(rng.integers(0, 4))
    if thickening:
        ink = ndimage.binary_dilation(ink > 0.5, iterations=thickening).astype(np.float64)
    return ink


def typeset_digits(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` typeset digits, balanced over the 10 classes and cycled over the fonts.

    Returns images of shape (count, 1, 8, 8) in [0, 1] (float32) and their labels (int64).
    """
    labels = np.arange(count) % 10
    fonts = rng.permutation(count) % len(FONT_FILES)
    images = np.stack([optdigits_8x8(handwritten_jitter(glyph_bitmap(FONT_FILES[f], int(d)), rng))
                       for f, d in zip(fonts, labels)])
    return images[:, None].astype(np.float32), labels.astype(np.int64)
