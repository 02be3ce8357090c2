"""One writer per run folder: a second `run`/`resume` of a folder another live process writes is
refused in one line naming that process; `report` still works; kill -9 frees the folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.loading import load_scenario
from testbed.run import RunFolder

# A process that creates a run folder, becomes its writer, and waits.
HOLDER = """
import sys, time, yaml
from testbed.run import RunFolder
folder = RunFolder.create(sys.argv[1], yaml.safe_load(open(sys.argv[2])))
print("holding", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Start a process holding a new run folder with the given resolved config."""
    started: list[subprocess.Popen] = []

    def start(run_dir: Path, config: dict) -> subprocess.Popen:
        config_path = tmp_path / f"{run_dir.name}-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        process = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir), str(config_path)],
                                   stdout=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "holding"
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.mark.integration
def test_a_second_writer_is_refused_report_works_and_kill_9_frees_the_folder(cli, write_scenario, holder,
                                                                              tmp_path):
    path = write_scenario()
    run_dir = tmp_path / "run"
    process = holder(run_dir, load_scenario(path).model_dump(mode="json"))
    in_use = f"error: {run_dir} is in use by another testbed process (pid {process.pid})"

    code, _, err = cli("resume", run_dir, "--quiet")
    assert code == 2 and err.startswith(in_use) and err.count("\n") == 1, err
    code, _, err = cli("run", path, "--run-dir", run_dir, "--quiet")
    assert code == 2 and err.startswith(in_use) and err.count("\n") == 1, err
    assert (run_dir / "config.yaml").is_file()  # the refused writers left the folder as it was

    code, out, err = cli("report", run_dir)  # a reader takes no lock
    assert code == 0 and (run_dir / "report" / "index.html").is_file(), err

    process.send_signal(signal.SIGKILL)
    process.wait()
    code, _, err = cli("resume", run_dir, "--quiet")  # the OS dropped the dead writer's lock
    assert code == 0, err
    assert RunFolder.open(run_dir).completed


@pytest.mark.integration
def test_a_sweep_folder_has_one_writer_too(cli, write_scenario, holder, tmp_path):
    path = write_scenario({"sweep": {"grid": {"seed": [1, 2]}}})
    sweep_dir = tmp_path / "sweep"
    process = holder(sweep_dir, yaml.safe_load(path.read_text()))

    code, _, err = cli("resume", sweep_dir, "--quiet")
    assert code == 2, err
    assert err.startswith(f"error: {sweep_dir} is in use by another testbed process (pid {process.pid})"), err
    assert not (sweep_dir / "variants").exists()  # no variant was started


@pytest.mark.integration
def test_the_lock_is_shared_within_one_process_and_released(tmp_path):
    run = RunFolder.create(tmp_path / "run", {"name": "x"})
    again = RunFolder.open(run.path)
    again.lock()  # this process already writes it: no conflict with itself
    again.unlock()
    assert (run.path / ".lock").read_text().strip() == str(os.getpid())
    run.unlock()
    probe = subprocess.run([sys.executable, "-c", "import fcntl, sys; fd = open(sys.argv[1]); "
                            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(run.path / ".lock")])
    assert probe.returncode == 0  # released: another process can take it
