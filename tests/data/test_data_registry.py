"""The dataset table answers what validation asks without loading anything, and answers it right."""

from __future__ import annotations

import pytest

from testbed.data.config import DataConfig
from testbed.data.datasets import DATASETS, load_dataset
from testbed.data.select import is_image_data


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_whether_a_bundled_dataset_is_images_matches_the_loaded_data(name):
    assert is_image_data(DataConfig(dataset=name)) == (load_dataset(name).image_shape is not None)
