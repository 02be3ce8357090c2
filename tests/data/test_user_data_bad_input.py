"""Bad input of a user's own data and model, run through the bad-input corpus's checks: ``validate``
and ``run`` each give one line naming the scenario file and the field (and the data file where there
is one), exit code 2, and leave no run folder.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

import numpy as np
import pytest

from tests.conftest import require_extra
from tests.core.test_bad_input_corpus import Case, F, Replace, W, assert_refused_cleanly


def _png(level: int = 100, size: tuple[int, int] = (20, 16), noise: bool = False) -> bytes:
    from PIL import Image

    pixels = np.full((*size, 3), level, dtype=np.uint8)
    if noise:  # noise does not compress: the file is large enough to cut in half
        pixels = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _npz(**arrays: Any) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # savez itself pickles object arrays: the reader must refuse them
    return buffer.getvalue()


def _csv(rows: int = 12, label: str = "y", values: str = "0,1,2") -> str:
    classes = values.split(",")
    lines = [f"a,b,color,site,{label}"]
    lines += [f"{i * 0.5},{i % 3},{['red', 'blue'][i % 2]},s{i % 4},{classes[i % len(classes)]}" for i in range(rows)]
    return "\n".join(lines) + "\n"


def _table(**options: Any) -> dict:
    return {"data": {"dataset": "table", "path": "{tmp}/t.csv", "label": "y", "categorical": ["color", "site"],
                     **options}, "workload": {"arch": "mlp"}}


def _images(**options: Any) -> dict:
    return {"data": {"dataset": "image_folder", "path": "{tmp}/imgs", **options}, "workload": {"arch": "mlp"}}


def _npz_data(**options: Any) -> dict:
    return {"data": {"dataset": "npz", "path": "{tmp}/d.npz", **options}, "workload": {"arch": "mlp"}}


def _fed(data: dict, clients: int = 4) -> dict:
    return {"data": Replace({**data, "num_clients": clients}), "workload": {"arch": "mlp"}}


def _model(spec: str, **extra: Any) -> dict:
    return {"workload": Replace({"name": "classifier", "model": spec, **extra})}


IMAGES: dict[str, str | bytes] = {"imgs/cat/0.png": _png(40), "imgs/cat/1.png": _png(60), "imgs/dog/0.png": _png(200),
          "imgs/dog/1.png": _png(220)}
NETS = '''
import torch
from torch import nn


def helper():
    return 1


class Net(nn.Module):
    def __init__(self, classes=10, fail=False, out=None):
        super().__init__()
        if fail:
            raise ValueError("no such layer width")
        self.linear = nn.Linear(64, out or classes)

    def forward(self, x):
        return self.linear(x.flatten(1))


class Picky(Net):
    def forward(self, x):
        return self.linear(x)  # forgets to flatten: fails on [B, 1, 8, 8]
'''


def _package(name: str) -> dict[str, str | bytes]:
    return {f"{name}/__init__.py": "", f"{name}/nets.py": NETS}


CASES: list[Case] = [
    # --- tables -------------------------------------------------------------------------------------
    Case("data-table-missing-file", W, _table(path="{tmp}/nope.csv"), ("data.path", "nope.csv", "does not exist")),
    Case("data-table-not-a-table", W, _table(path="{tmp}/t.txt"), ("data.path", "t.txt", ".csv or .parquet"),
         files={"t.txt": _csv()}),
    Case("data-table-missing-label-column", W, _table(label="outcome"),
         ("data.label", "t.csv", "no column 'outcome'"), files={"t.csv": _csv()}),
    Case("data-table-text-feature-not-categorical", W, _table(categorical=["site"]),
         ("data.categorical", "t.csv", "'color'", "not numbers"), files={"t.csv": _csv()}),
    Case("data-table-unknown-option", W, _table(lable="y"), ("data.lable", "did you mean 'label'"),
         files={"t.csv": _csv()}),
    # Misspelt, the label is both an unknown key and a missing one: the line names the typo.
    Case("data-table-misspelt-required-option", W,
         {"data": {"dataset": "table", "path": "{tmp}/t.csv", "lable": "y", "categorical": ["color", "site"]},
          "workload": {"arch": "mlp"}}, ("data.lable", "did you mean 'label'"), files={"t.csv": _csv()}),
    Case("data-table-label-sets-differ", W, _table(test_path="{tmp}/test.csv"),
         ("data.test_path", "test.csv", "label sets", "7"),
         files={"t.csv": _csv(), "test.csv": _csv(rows=6, values="0,1,7")}),
    Case("data-table-fewer-samples-than-clients", F, _fed({"dataset": "table", "path": "{tmp}/t.csv", "label": "y",
                                                           "categorical": ["color", "site"]}),
         ("data.num_clients", "t.csv", "3 samples"), files={"t.csv": _csv(rows=3)}),
    Case("data-table-natural-client-count", F,
         _fed({"dataset": "table", "path": "{tmp}/t.csv", "label": "y", "categorical": ["color"], "group": "site",
               "partition": {"type": "natural"}}, clients=3),
         ("data.num_clients", "4 owners"), files={"t.csv": _csv(rows=40)}),
    Case("data-natural-without-owners", F, {"data": {"partition": Replace({"type": "natural"})}},
         ("data.partition.type", "no owners")),
    Case("data-natural-column-of-image-folder", W, _images(partition={"type": "natural", "column": "x"}),
         ("data.partition.column", "no columns"), files=IMAGES),
    # --- image folders ------------------------------------------------------------------------------
    Case("data-image-folder-missing", W, _images(path="{tmp}/nowhere"), ("data.path", "nowhere", "does not exist")),
    Case("data-image-folder-empty-class", W, _images(), ("data.path", "bird", "holds no images"),
         files={**IMAGES, "imgs/bird/notes.txt": "no pictures"}),
    Case("data-image-folder-unreadable-image", W, _images(), ("data.path", "2.png", "not a readable image"),
         files={**IMAGES, "imgs/dog/2.png": b"\x89PNG but not really"}),
    Case("data-image-folder-truncated-image", W, _images(), ("data.path", "2.png", "not a readable image"),
         files={**IMAGES, "imgs/dog/2.png": _png(size=(64, 64), noise=True)[:6000]}),
    Case("data-image-folder-label-sets-differ", W, _images(test_path="{tmp}/test"),
         ("data.test_path", "label sets", "bird"),
         files={**IMAGES, "test/cat/0.png": _png(50), "test/bird/0.png": _png(120)}),
    Case("data-image-folder-bad-size", W, _images(image_size=[0, 8]), ("data.image_size", "greater than 0"),
         files=IMAGES),
    # --- npz and Hugging Face ------------------------------------------------------------------------
    Case("data-npz-object-array", W, _npz_data(), ("data.path", "d.npz", "Python objects"),
         files={"d.npz": _npz(x=np.array([{"a": 1}] * 4, dtype=object), y=np.arange(4))}),
    Case("data-npz-missing-labels", W, _npz_data(), ("data.y", "d.npz", "no array 'y'"),
         files={"d.npz": _npz(x=np.zeros((4, 3)), labels=np.arange(4))}),
    Case("data-npz-not-an-archive", W, _npz_data(), ("data.path", "d.npz", "not an .npz"),
         files={"d.npz": "x,y\n1,2\n"}),
    Case("data-npz-label-sets-differ", W, _npz_data(), ("data.y_test", "d.npz", "label sets", "5"),
         files={"d.npz": _npz(x=np.zeros((6, 3)), y=np.arange(6) % 2, x_test=np.zeros((2, 3)), y_test=[0, 5])}),
    Case("data-npz-fewer-samples-than-clients", F, _fed({"dataset": "npz", "path": "{tmp}/d.npz"}),
         ("data.num_clients", "d.npz", "2 samples"), files={"d.npz": _npz(x=np.zeros((2, 3)), y=[0, 1])}),
    Case("data-huggingface-not-saved", W, {"data": {"dataset": "huggingface", "path": "{tmp}/saved"}},
         ("data.", "saved"), files={"saved/readme.txt": "not a dataset"}),
    # --- the user's model ---------------------------------------------------------------------------
    Case("model-no-such-module", W, _model("no_such_package_h6.nets:Net"), ("workload.model", "cannot be imported")),
    Case("model-not-an-nn-module", W, _model("userpkg_a.nets:helper"), ("workload.model", "not a torch.nn.Module"),
         files=_package("userpkg_a")),
    Case("model-missing-class", W, _model("userpkg_b.nets:Missing"), ("workload.model", "missing from"),
         files=_package("userpkg_b")),
    Case("model-constructor-error", W, _model("userpkg_c.nets:Net", model_args={"fail": True}),
         ("workload.model", "cannot be built", "no such layer width"), files=_package("userpkg_c")),
    Case("model-forward-error", W, _model("userpkg_d.nets:Picky"),
         ("workload.model", "fails on a batch", "(2, 1, 8, 8)"), files=_package("userpkg_d")),
    Case("model-wrong-output", W, _model("userpkg_e.nets:Net", model_args={"out": 3}),
         ("workload.model", "expected (2, 10)"), files=_package("userpkg_e")),
    Case("model-standard-library", W, _model("os:system"), ("workload.model", "standard library")),
    Case("model-testbed-internals", W, _model("testbed.workloads.classifier.model:nn"),
         ("workload.model", "not a user package")),
    Case("model-args-without-model", W, {"workload": {"model_args": {"width": 3}}},
         ("workload.model_args", "workload.model, which is not set")),
    Case("model-and-arch", W, _model("userpkg_f.nets:Net", arch="mlp"), ("workload.arch", "remove one"),
         files=_package("userpkg_f")),
]


@pytest.fixture
def own_import_path(monkeypatch):
    """A case may import a package from its folder (the working directory): undo that afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    from testbed.workloads.usermodel import probe_data

    probe_data.cache_clear()
    yield
    probe_data.cache_clear()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_user_data_or_model_is_one_line_exit_2_and_leaves_no_run_folder(cli, tmp_path, monkeypatch,
                                                                             own_import_path, case: Case):
    if case.id.startswith("data-huggingface"):
        require_extra("datasets", "hf")
    assert_refused_cleanly(cli, tmp_path, monkeypatch, case)
