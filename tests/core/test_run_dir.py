"""``--run-dir`` as users give it: their own empty folder, a link to one, a name the system refuses.

A run that fails before its first checkpoint removes what it wrote, and only that: a folder the
user made stays (empty), a link stays a link, and the files written through it go. A name too long
for the file system is one line naming it, not a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_bad_input_corpus import _assert_one_line_naming, _tiny_file


def _diverging(tmp_path: Path, monkeypatch) -> tuple[Path, int]:
    """A scenario whose run stops in one line (exit 2) at its first steps, before any checkpoint."""
    return _tiny_file(tmp_path, workload={"lr": 1e30}), 2


def _internal_error(tmp_path: Path, monkeypatch) -> tuple[Path, int]:
    """A scenario whose run meets a bug (exit 1) at its first step, before any checkpoint."""
    from testbed.workloads.classifier.workload import ClassifierWorkload

    def broken(self, steps: int) -> dict[str, float]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(ClassifierWorkload, "train", broken)
    return _tiny_file(tmp_path), 1


@pytest.mark.parametrize("failure", [_diverging, _internal_error], ids=["user-error", "internal-error"])
@pytest.mark.parametrize("linked", [False, True], ids=["empty-folder", "link-to-empty-folder"])
def test_a_failed_run_removes_what_it_wrote_and_keeps_the_users_folder(cli, tmp_path, monkeypatch, failure, linked):
    scenario, expected = failure(tmp_path, monkeypatch)
    folder = tmp_path / "mine"
    folder.mkdir()
    run_dir = folder
    if linked:
        run_dir = tmp_path / "link"
        run_dir.symlink_to(folder, target_is_directory=True)
    code, _, _ = cli("run", scenario, "--run-dir", run_dir, "--quiet")
    assert code == expected
    assert folder.is_dir() and list(folder.iterdir()) == []  # the user's folder, emptied of the run's files
    assert run_dir.is_symlink() == linked


@pytest.mark.parametrize("command", ["run", "resume"])
def test_a_run_dir_name_too_long_for_the_file_system_is_one_line(cli, tmp_path, command):
    run_dir = tmp_path / ("r" * 300)
    args = ("run", _tiny_file(tmp_path), "--run-dir", run_dir, "--quiet") if command == "run" else ("resume", run_dir)
    code, _, err = cli(*args)
    _assert_one_line_naming(err, run_dir, [], ("File name too long",))
    assert code == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == (["scenario.yaml"] if command == "run" else [])
