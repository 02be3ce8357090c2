"""Small real files of each user data format, written into a test's temporary folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_table(path: Path, rows: int = 160, owners: int = 4, seed: int = 0) -> Path:
    """A table with numeric features ``a``, ``b``, a text feature ``color``, an owner column ``site``
    and a text label ``outcome`` that depends on ``a`` and ``color``; Parquet or CSV by suffix."""
    import pyarrow as pa
    from pyarrow import csv, parquet

    rng = np.random.default_rng(seed)
    a, color = rng.normal(size=rows), rng.choice(["red", "green", "blue"], rows)
    table = pa.table({
        "a": a, "b": rng.normal(size=rows), "color": color,
        "site": [f"hospital-{i}" for i in rng.integers(0, owners, rows)],
        "outcome": np.where(a + (color == "red") > 0.3, "yes", "no"),
    })
    if path.suffix == ".csv":
        csv.write_csv(table, path)
    else:
        parquet.write_table(table, path)
    return path


def write_image_folder(root: Path, classes: dict[str, int], seed: int = 0) -> Path:
    """``root/<class>/<i>.png|jpg`` of random sizes; class k is a noisy grey of level 40 + 160 k."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k, (name, count) in enumerate(classes.items()):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            size = (int(rng.integers(9, 40)), int(rng.integers(9, 40)), 3)
            pixels = np.clip(rng.normal(40 + 160 * k, 20, size), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / (f"{i}.png" if i % 2 else f"{i}.jpg"))
    return root


def write_npz(path: Path, samples: int = 60, shape: tuple[int, ...] = (5,), seed: int = 0, **extra) -> Path:
    """An .npz with ``x`` [samples, *shape] and ``y`` in 0..2 (y = the sign pattern of x's mean)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, *shape)).astype(np.float32)
    y = np.digitize(x.reshape(samples, -1).mean(axis=1), [-0.2, 0.2]).astype(np.int64)
    np.savez(path, x=x, y=y, **extra)
    return path


def write_hf_dataset(path: Path, samples: int = 30) -> Path:
    """A DatasetDict (train, test) of small RGB images and a ClassLabel, saved with save_to_disk."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    labels = [i % 3 for i in range(samples)]
    images = [Image.fromarray(np.clip(rng.normal(40 + 80 * k, 10, (12, 9, 3)), 0, 255).astype(np.uint8))
              for k in labels]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    full = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    split = samples * 4 // 5
    datasets.DatasetDict({"train": full.select(range(split)), "test": full.select(range(split, samples))}) \
        .save_to_disk(str(path))
    return path
