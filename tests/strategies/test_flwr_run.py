"""``flwr run`` of the SDEA Flower App (scenarios/flower-app): it finishes and leaves nothing of ours behind.

Under a local federation ``flwr run`` starts Flower's managed SuperLink detached and keeps it, with
its SuperExec and an idle ``flwr-simulation``, for the next run (``flwr/cli/local_superlink.py``).
The test checks the three halves of "no process outlives its command" that are ours to keep: the
run ends with its result; once it has, nothing but that managed runtime is left (no Ray worker, no
ClientAppActor); and stopping the SuperLink as docs/cluster.md says takes every process down.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

APP = Path(__file__).resolve().parents[2] / "scenarios" / "flower-app"
MANAGED = ("flower-superlink", "flower-superexec", "flwr-simulation")  # Flower's runtime, kept by design


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _superlinks(flwr_home: Path) -> list[psutil.Process]:
    """The managed SuperLinks started for this FLWR_HOME (their log file lives under it)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "flower-superlink" in cmdline and str(flwr_home) in cmdline:
            found.append(proc)
    return found


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs: an exited child the SuperLink has not reaped yet (a zombie) does not
    (one was left for over 30 s once, under load, and read as a stray)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:160]
    except psutil.Error:
        return f"pid {proc.pid} (gone)"


@pytest.mark.integration
def test_flwr_run_of_the_sdea_app_finishes_and_leaves_only_flowers_managed_superlink(tmp_path):
    flwr_home = tmp_path / "flwr-home"
    env = {**os.environ, "FLWR_HOME": str(flwr_home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port()), "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
           "FLWR_DISABLE_UPDATE_CHECK": "1",  # no call home: CI reaches only package registries
           # A Ray cluster another test left up on this machine (tests/cluster) is what a bare
           # ray.init() in Flower's simulation would join: start its own instead.
           "RAY_ADDRESS": "local"}
    command = ["flwr", "run", str(APP), "--stream", "--federation-config", "num-supernodes=6",
               "--run-config", "num-server-rounds=2 sdea-epochs=5 public-size=256"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=480)
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        assert "sdea final test accuracy" in out, out[-3000:]

        # After the run: only Flower's managed runtime is left, no simulation worker of the run.
        superlinks = _superlinks(flwr_home)
        assert len(superlinks) == 1, [_name(p) for p in superlinks]
        deadline = time.monotonic() + 30
        while True:
            left = _tree(superlinks[0])
            strays = [_name(p) for p in left if _running(p) and not any(m in _name(p) for m in MANAGED)]
            if not strays or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert strays == [], strays

        # Stopping the SuperLink as docs/cluster.md says (SIGTERM, what `pkill -f flower-superlink`
        # sends) takes its SuperExec and simulation process down with it.
        superlinks[0].send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(left, timeout=30)
        assert alive == [], [_name(p) for p in alive]
    finally:
        for proc in _superlinks(flwr_home):
            for member in _tree(proc):
                member.kill()
