"""The CLI in a process of its own, for the tests that need one: a run killed midway by
`testbed.faults`, a hang that must time out, a Ray or a Flower simulation that must end with its
process, an exit code and stderr exactly as a shell sees them.

The process is forked from one warm server per test worker (`testbed.engines.warm`, the way a
sweep's variants start), which imported every kind's modules once: a fresh interpreter paid 1.5-2
CPU-s of imports per call (torch, Flower, Ray, scikit-learn), about 50 calls in the suite. It
is still its own process (its globals, seeds, signals, exit code), with the caller's whole
environment; where the caller's folder is not the server's, the call starts a fresh interpreter
instead, as the child would otherwise resolve relative paths against the wrong folder. The server
is this module's own, not the registry's that sweeps release as they end, and stops with the worker.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

from testbed.engines.warm import WarmServer
from testbed.kinds import RUNNERS, warm_modules

WARM_MODULES = sorted({module for kind in RUNNERS for module in warm_modules(kind)})
_server: WarmServer | None = None
_server_cwd = ""


def cli_process(*args: object, env_extra: dict[str, str] | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess:
    """``testbed ARGS`` run to its end in a process of its own; past ``timeout`` seconds (a hang) it
    is killed and `subprocess.TimeoutExpired` raised."""
    argv = [str(arg) for arg in args]
    env = {**os.environ, "CI": "1", **(env_extra or {})}
    server = _warm_server()
    if server is None:
        return subprocess.run([sys.executable, "-m", "testbed.cli", *argv], env=env, capture_output=True,
                              text=True, timeout=timeout)
    with server.start("testbed.cli", argv, env=env) as process:
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        out, err = process.communicate()
    return subprocess.CompletedProcess(["testbed", *argv], code, out, err)


def _warm_server() -> WarmServer | None:
    """This worker's server, started on first use (again where it died); None where the caller's
    folder is not the one it was started in."""
    global _server, _server_cwd
    if _server is None or not _server.alive():
        _server, _server_cwd = WarmServer(WARM_MODULES, {**os.environ, "CI": "1"}), os.getcwd()
    return _server if os.getcwd() == _server_cwd else None


@atexit.register
def _stop() -> None:
    if _server is not None:
        _server.close()
