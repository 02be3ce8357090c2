"""A missing data file deep in a long folder is named by its file name: the error line cuts the start of
a long path, never its end (found when pytest-xdist's longer temporary folders hid the name)."""

from __future__ import annotations

import pytest

from tests.core.test_bad_input_corpus import Case, _assert_one_line_naming, _prepare

DEEP = "{tmp}/" + "a-long-folder-name/" * 6

CASES = [
    Case("data-table-missing-deep-file", "workload",
         {"data": {"dataset": "table", "path": DEEP + "nope.csv", "label": "y"}, "workload": {"arch": "mlp"}},
         ("data.path", "nope.csv'", "does not exist")),
    Case("data-image-folder-missing-deep", "workload",
         {"data": {"dataset": "image_folder", "path": DEEP + "nowhere"}, "workload": {"arch": "mlp"}},
         ("data.path", "nowhere'", "does not exist")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_missing_file_in_a_long_folder_is_named_by_its_file_name(cli, tmp_path, case: Case):
    path, overrides = _prepare(case, tmp_path)
    code, _, err = cli("validate", path, *overrides)
    assert code == 2
    _assert_one_line_naming(err, path, overrides, case.words)
