"""A user's own data: a CSV or Parquet table, an image folder, an .npz, a saved Hugging Face dataset;
natural partitions; the source registry, its plugins and `testbed list datasets`.

Every test writes small real files of the format into its temporary folder; the workload-kind runs
at the end go through the CLI as a user would (the federated run on a table with natural partitions
is in tests/workloads/test_user_model.py, with the user's own model).
"""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
import yaml

from testbed.data import train_test_split
from testbed.data.base import DataSource
from testbed.data.config import DataConfig
from testbed.data.partition import NaturalPartition, PartitionError, partition_indices
from testbed.data.select import check_data_selection, is_image_data, load_selected
from testbed.data.sources import registered_sources
from testbed.errors import ScenarioError
from tests.conftest import require_extra
from tests.data.user_files import write_hf_dataset, write_image_folder, write_npz, write_table


def _data(**block) -> DataConfig:
    return DataConfig.model_validate(block)


# --- tables --------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_table_reads_numeric_and_categorical_features_labels_and_owners(tmp_path, suffix):
    path = write_table(tmp_path / f"t{suffix}")
    data = _data(dataset="table", path=str(path), label="outcome", categorical=["color"], group="site")
    check_data_selection(data, "s.yaml")
    full = load_selected(data)
    assert full.x.shape == (160, 2) and full.categories is not None and full.categories.shape == (160, 1)
    assert full.num_classes == 2 and set(np.unique(full.y)) == {0, 1}
    assert sorted(np.unique(full.groups)) == [0, 1, 2, 3] and not is_image_data(data)
    train, test = train_test_split(full, 0.25, seed=0)
    assert train.x.shape[1] == 2 + 3  # two numeric columns, then one 0/1 column per colour
    assert np.array_equal(train.x[:, 2:].sum(axis=1), np.ones(len(train.y)))
    assert train.groups is not None and len(train.groups) == len(train.y)


def test_a_category_seen_only_in_testing_is_encoded_as_all_zeros(tmp_path):
    import pyarrow as pa
    from pyarrow import parquet

    train = pa.table({"a": [0.0, 1.0, 2.0, 3.0], "color": ["red", "blue", "red", "blue"], "y": [0, 1, 0, 1]})
    test = pa.table({"a": [0.5, 1.5], "color": ["green", "red"], "y": [0, 1]})
    parquet.write_table(train, tmp_path / "train.parquet")
    parquet.write_table(test, tmp_path / "test.parquet")
    data = _data(dataset="table", path=str(tmp_path / "train.parquet"), test_path=str(tmp_path / "test.parquet"),
                 label="y", categorical=["color"])
    check_data_selection(data, "s.yaml")
    fit, held = train_test_split(load_selected(data), 0.25, seed=0)
    assert len(fit.y) == 4 and len(held.y) == 2  # the source's own split, not test_fraction
    assert fit.x.shape[1] == held.x.shape[1] == 1 + 2  # blue, red: green was never trained on
    assert held.x[0, 1:].tolist() == [0.0, 0.0] and held.x[1, 1:].tolist() == [0.0, 1.0]


# --- natural partitions --------------------------------------------------------------------------


def test_a_natural_partition_gives_each_owner_its_own_client():
    groups = np.array([2, 0, 1, 2, 0, 2])
    parts = partition_indices(np.zeros(6, dtype=np.int64), 3, NaturalPartition(), np.random.default_rng(0),
                              groups=groups)
    assert [p.tolist() for p in parts] == [[1, 4], [2], [0, 3, 5]]


def test_a_natural_partition_refuses_a_client_count_that_is_not_the_owner_count():
    with pytest.raises(PartitionError, match="data.num_clients: 4 clients but the training split has 3 owners"):
        partition_indices(np.zeros(6, dtype=np.int64), 4, NaturalPartition(), np.random.default_rng(0),
                          groups=np.array([0, 1, 2, 0, 1, 2]))


def test_a_natural_partition_by_a_column_reads_that_column(tmp_path):
    path = write_table(tmp_path / "t.parquet", owners=3)
    data = _data(dataset="table", path=str(path), label="outcome", categorical=["color"], num_clients=3,
                 partition={"type": "natural", "column": "site"})
    full = load_selected(data)
    parts = partition_indices(full.y, 3, data.partition, np.random.default_rng(0), groups=full.groups)
    sites = np.asarray(__import__("pyarrow.parquet").parquet.read_table(path).column("site").to_pylist())
    assert [sorted(set(sites[p])) for p in parts] == [["hospital-0"], ["hospital-1"], ["hospital-2"]]


def test_femnist_writers_are_the_owners_of_a_natural_partition(tmp_path):
    shard = {"users": ["w1", "w2"], "num_samples": [2, 1],
             "user_data": {"w1": {"x": [[0.0] * 784, [1.0] * 784], "y": [3, 4]}, "w2": {"x": [[0.5] * 784], "y": [3]}}}
    (tmp_path / "all.json").write_text(json.dumps(shard))
    full = load_selected(_data(dataset="femnist", path=str(tmp_path)))
    assert full.groups is not None and full.groups.tolist() == [0, 0, 1]


def test_a_natural_partition_of_a_source_without_owners_is_refused_before_loading():
    with pytest.raises(ScenarioError, match="data.partition.type: dataset 'digits' names no owners"):
        check_data_selection(_data(dataset="digits", num_clients=2, partition={"type": "natural"}), "s.yaml")


# --- image folders, npz, Hugging Face --------------------------------------------------------------


def test_an_image_folder_resizes_every_image_to_one_shape(tmp_path):
    root = write_image_folder(tmp_path / "imgs", {"cat": 3, "dog": 4})
    data = _data(dataset="image_folder", path=str(root), image_size=[6, 10], channels=1)
    check_data_selection(data, "s.yaml")
    full = load_selected(data)
    assert full.x.shape == (7, 1, 6, 10) and full.image_shape == (1, 6, 10) and is_image_data(data)
    assert full.y.tolist() == [0, 0, 0, 1, 1, 1, 1] and 0 <= full.x.min() and full.x.max() <= 1
    assert full.x[:3].mean() < 0.4 < full.x[3:].mean()  # the dark class first (sorted names), the light second


def test_an_npz_of_images_keeps_their_shape_and_a_test_split(tmp_path):
    rng = np.random.default_rng(1)
    path = write_npz(tmp_path / "d.npz", samples=20, shape=(8, 8), x_test=rng.random((6, 8, 8)),
                     y_test=np.array([0, 1, 2, 0, 1, 2]))
    data = _data(dataset="npz", path=str(path))
    check_data_selection(data, "s.yaml")
    assert is_image_data(data)
    train, test = train_test_split(load_selected(data), 0.5, seed=0)
    assert train.x.shape == (20, 1, 8, 8) and test.x.shape == (6, 1, 8, 8)


def test_an_npz_is_checked_from_its_headers_without_reading_the_arrays(tmp_path, monkeypatch):
    path = write_npz(tmp_path / "d.npz", samples=50)
    reads = []
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: reads.append(a) or (_ for _ in ()).throw(
        AssertionError("validation read an array")))
    check_data_selection(_data(dataset="npz", path=str(path)), "s.yaml")
    assert reads == []


def test_a_saved_hugging_face_dataset_reads_its_images_labels_and_splits(tmp_path):
    require_extra("datasets", "hf")
    path = write_hf_dataset(tmp_path / "saved", samples=30)
    data = _data(dataset="huggingface", path=str(path), image_size=[4, 5])
    check_data_selection(data, "s.yaml")
    train, test = train_test_split(load_selected(data), 0.25, seed=0)
    assert train.x.shape == (24, 3, 4, 5) and test.x.shape == (6, 3, 4, 5) and is_image_data(data)
    assert train.num_classes == 3 and train.y.tolist()[:4] == [0, 1, 2, 0]


# --- the registry ----------------------------------------------------------------------------------


def test_every_source_carries_its_name_options_and_summary_on_its_class():
    sources = registered_sources()
    assert {"digits", "cifar10", "fashion_mnist", "femnist", "table", "image_folder", "npz", "huggingface"} <= \
        set(sources)
    for name, cls in sources.items():
        assert issubclass(cls, DataSource) and cls.name == name and cls.summary


class _Echo(DataSource):
    """A plugin source of three constant samples (the test's own)."""

    name = "echo"
    summary = "three samples"
    needs_path = False
    image = False

    def load(self):
        from testbed.data.datasets import Dataset

        return Dataset("echo", np.eye(3, dtype=np.float32), np.arange(3), 3, None)


def test_a_plugin_source_enters_through_the_testbed_datasets_entry_point_group(monkeypatch):
    point = EntryPoint("echo", f"{__name__}:_Echo", "testbed.datasets")
    monkeypatch.setattr("testbed.plugins.entry_points", lambda group: [point] if group == "testbed.datasets" else [])
    registered_sources.cache_clear()
    try:
        assert registered_sources()["echo"] is _Echo
        assert load_selected(_data(dataset="echo")).y.tolist() == [0, 1, 2]
    finally:
        registered_sources.cache_clear()


def test_list_datasets_shows_each_source_with_its_options(cli):
    code, out, _ = cli("list", "datasets")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "label (required)" in lines["table"] and "categorical" in lines["table"]
    assert "image_size" in lines["image_folder"] and "hf" in lines["huggingface"] and "x_test" in lines["npz"]


# --- workload-kind runs on each format, through the CLI ---------------------------------------------


def _run(cli, tmp_path: Path, data: dict, arch: str, steps: int = 12) -> dict:
    scenario = {"name": "mine", "kind": "workload", "seed": 1, "data": data,
                "workload": {"name": "classifier", "arch": arch, "hidden": 8, "batch_size": 8},
                "training": {"steps": steps, "eval_every": 6}}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    code, _, err = cli("run", path, "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    return json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])


def test_a_workload_runs_on_an_image_folder_with_its_own_test_folder(cli, tmp_path):
    train = write_image_folder(tmp_path / "train", {"dark": 6, "light": 6})
    test = write_image_folder(tmp_path / "test", {"dark": 3, "light": 3}, seed=1)
    final = _run(cli, tmp_path, {"dataset": "image_folder", "path": str(train), "test_path": str(test),
                                 "image_size": [12, 12]}, "mlp")
    assert final["step"] == 12 and final["test_accuracy"] == 1.0  # grey levels 40 vs 200 are easy


def test_a_workload_runs_on_an_npz(cli, tmp_path):
    final = _run(cli, tmp_path, {"dataset": "npz", "path": str(write_npz(tmp_path / "d.npz", samples=80))}, "mlp")
    assert final["step"] == 12 and 0 <= final["test_accuracy"] <= 1


def test_a_workload_runs_on_a_saved_hugging_face_dataset(cli, tmp_path):
    require_extra("datasets", "hf")
    final = _run(cli, tmp_path, {"dataset": "huggingface", "path": str(write_hf_dataset(tmp_path / "saved", 45)),
                                 "image_size": [8, 8]}, "cnn")
    assert final["step"] == 12 and final["test_accuracy"] > 0.5  # three grey levels, 9 test images


def test_a_workload_runs_on_a_csv_table_with_a_categorical_column(cli, tmp_path):
    final = _run(cli, tmp_path, {"dataset": "table", "path": str(write_table(tmp_path / "t.csv")),
                                 "label": "outcome", "categorical": ["color", "site"]}, "mlp", steps=48)
    assert final["step"] == 48 and final["test_accuracy"] > 0.7  # the label is a + (color == red) > 0.3
