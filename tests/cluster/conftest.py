"""Emulated clusters for the cluster tests, always shut down, even when a test fails.

`emulated_cluster` is `testbed cluster up` with three nodes: a head without CPUs (it hosts the
drivers and is never killed) and two one-CPU workers, so every task runs on a worker node a test
may kill. It is shared by the whole session (one start-up); the test that kills a node runs last
among those that count nodes. Its state lives in a temporary folder.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from testbed.cluster import local


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants, those still running (not exited, not zombies)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    return [p for p in tree if still_running(p)]


def still_running(process: psutil.Process) -> bool:
    """Whether the process exists and has not exited (a zombie has)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def command_line(process: psutil.Process) -> str:
    """The command line, or "" for a process that ended meanwhile."""
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


def listening_sockets(processes: list[psutil.Process]) -> list[tuple[str, int, str]]:
    """(address, port, process command) of every TCP socket these processes listen on."""
    by_pid = {p.pid: p for p in processes}
    found = []
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in by_pid:
            found.append((conn.laddr.ip, conn.laddr.port, command_line(by_pid[conn.pid])))
    return found


@pytest.fixture(scope="session")
def emulated_cluster(tmp_path_factory):
    """`testbed cluster up --nodes 3 --cpus-per-node 1 --head-cpus 0`: every task runs on a worker node."""
    folder = tmp_path_factory.mktemp("cluster-state")
    previous = os.environ.get(local.STATE_DIR_ENV)
    os.environ[local.STATE_DIR_ENV] = str(folder)
    state = None
    try:
        state = local.up(nodes=3, cpus_per_node=1, head_cpus=0)
        yield state
    finally:
        local.down()
        if state is not None:
            _kill_group(state["keeper_pid"])
        if previous is None:
            os.environ.pop(local.STATE_DIR_ENV, None)
        else:
            os.environ[local.STATE_DIR_ENV] = previous


def _kill_group(pid: int) -> None:
    """Last resort after `down`: the keeper's process group is the whole cluster."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_json_lines(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]
