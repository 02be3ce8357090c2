"""Tampered or odd finished run folders: ``testbed resume`` and ``testbed report`` end in one line
naming the file, exit 2, never a traceback or a hang.

One tiny federated run (with a baseline, so the folder has every part) is made once for the
module; each case copies it, alters one thing as a user, a script or an attacker might, and runs
the command. A resume needs an unfinished run, so its copies lose summary.json first (a run killed
after its last checkpoint). The commands run as subprocesses with a timeout: a FIFO that blocks a
read would hang the test, not pass it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.core.test_bad_input_corpus import _assert_one_line_naming
from tests.federated.test_federated_runs import FEDERATED
from tests.processes import cli_process

DEEP = "[" * 100_000 + "]" * 100_000  # beyond the JSON parser's recursion limit
SCENARIO = {**FEDERATED, "federated": {**FEDERATED["federated"], "rounds": 2, "baselines": ["no_attack"]}}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("finished")
    (folder / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    done = cli_process("run", folder / "scenario.yaml", "--run-dir", folder / "run", "--quiet")
    assert done.returncode == 0, done.stderr
    return folder / "run"


def _newest(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]


def _save(path: Path, checkpoint: object) -> None:
    import torch

    path.unlink()
    torch.save(checkpoint, path)


def _loaded(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True)


def checkpoint_is_a_folder(run: Path) -> Path:
    path = _newest(run)
    path.unlink()
    path.mkdir()
    return path


def checkpoint_links_to_another_file(run: Path) -> Path:
    path = _newest(run)
    path.unlink()
    path.symlink_to(run / "config.yaml")
    return path


def checkpoint_is_a_fifo(run: Path) -> Path:
    path = run / "checkpoints" / "ckpt-000000099.pt"  # the newest by its name
    os.mkfifo(path)
    return path


def checkpoint_is_a_raw_pickle(run: Path) -> Path:
    path = _newest(run)
    path.write_bytes(pickle.dumps({"step": 2, "metrics_count": 2}))
    return path


def checkpoint_misses_a_key(run: Path) -> Path:
    path = _newest(run)
    checkpoint = _loaded(path)
    del checkpoint["metrics_count"]
    _save(path, checkpoint)
    return path


def checkpoint_step_is_text(run: Path) -> Path:
    path = _newest(run)
    _save(path, {**_loaded(path), "step": "2"})
    return path


def checkpoint_model_is_a_list(run: Path) -> Path:
    path = _newest(run)
    _save(path, {**_loaded(path), "global_state": [1, 2, 3]})
    return path


def baseline_is_a_link(run: Path) -> Path:
    path = run / "baselines" / "no_attack"
    elsewhere = run.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    shutil.rmtree(path)
    path.symlink_to(elsewhere, target_is_directory=True)
    return path


def metrics_nested_deeply(run: Path) -> Path:
    path = run / "metrics.jsonl"
    path.write_text(DEEP + "\n" + path.read_text())
    return path


def summary_nested_deeply(run: Path) -> Path:
    path = run / "summary.json"
    path.write_text(DEEP)
    return path


def summary_not_an_object(run: Path) -> Path:
    path = run / "summary.json"
    path.write_text("[1, 2]")
    return path


def artifacts_hold_an_object_array(run: Path) -> Path:
    path = run / "artifacts.npz"
    np.savez(path, label_histograms=np.array([{"a": 1}], dtype=object))
    return path


def clients_record_is_malformed(run: Path) -> Path:
    path = run / "clients.jsonl"
    path.write_text(json.dumps({"round": 1, "clients": {"0": 5}}) + "\n")
    return path


@dataclass(frozen=True)
class Tamper:
    """One alteration of a finished run folder, the command run on it, and the words of its line."""

    alter: Callable[[Path], Path]  # alters the folder; returns the file the line must name
    command: str
    words: tuple[str, ...]


TAMPERINGS = [
    Tamper(checkpoint_is_a_folder, "resume", ("not a plain file",)),
    Tamper(checkpoint_links_to_another_file, "resume", ("a symbolic link",)),
    Tamper(checkpoint_is_a_fifo, "resume", ("not a plain file",)),
    Tamper(checkpoint_is_a_raw_pickle, "resume", ("not a checkpoint this testbed can load safely",)),
    Tamper(checkpoint_misses_a_key, "resume", ("'metrics_count' is None, not a count",)),
    Tamper(checkpoint_step_is_text, "resume", ("'step' is '2', not a count",)),
    Tamper(checkpoint_model_is_a_list, "resume", ("'global_state' is not a state of the scenario's model",)),
    Tamper(baseline_is_a_link, "resume", ("a symbolic link, not the run's own baseline folder",)),
    Tamper(metrics_nested_deeply, "resume", ("line 1: JSON nested too deeply",)),
    Tamper(metrics_nested_deeply, "report", ("line 1: JSON nested too deeply",)),
    Tamper(summary_nested_deeply, "report", ("JSON nested too deeply",)),
    Tamper(summary_not_an_object, "report", ("not a JSON object (got list)",)),
    Tamper(artifacts_hold_an_object_array, "report", ("not an archive of plain arrays",)),
    Tamper(clients_record_is_malformed, "report", ("line 1: not a round of the per-client record",)),
]


@pytest.mark.integration
@pytest.mark.parametrize("tamper", TAMPERINGS, ids=[f"{t.command}-{t.alter.__name__}" for t in TAMPERINGS])
def test_a_tampered_run_folder_is_one_line_naming_the_file(finished_run: Path, tmp_path: Path, tamper: Tamper):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    if tamper.command == "resume":
        (run / "summary.json").unlink()  # killed after its last checkpoint: resumable
    named = tamper.alter(run)
    done = cli_process(tamper.command, run, *(["--quiet"] if tamper.command == "resume" else []), timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    _assert_one_line_naming(done.stderr, named, [], tamper.words)

