"""Child processes forked from a warm server instead of started afresh: each still its own process
(its globals, seeds, signals, crash and exit code), without the interpreter's start-up and the
imports (torch, scikit-learn, ... : seconds each time).

`warm_server(modules, env)` is this process's server for that environment and those modules,
started on first use (`testbed.engines.warm_server`: it imports ``modules`` once) and kept for the
later calls, also from other threads; `WarmServer.start` forks a child that runs a module as
``python -m`` would and returns a `WarmProcess`, which answers as `subprocess.Popen` does
(``pid``, ``send_signal``, ``kill``, ``wait``, ``communicate``, ``returncode``). The child's output
goes to temporary files, read once it has exited.

`close_warm_servers` stops them (also at this process's exit), and so does `release_warm_servers`,
which a sweep calls as it ends, unless a `servers_kept` block keeps them for the next sweep. A
server whose client dies stops by itself, and children it still runs then get SIGINT. A sweep
places its variants this way (`testbed.sweep`): one server per machine, in the sweep's process on
this machine, in each machine's placement host on a Ray cluster (`testbed.engines.ray_engine.RayPlacementEngine`).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any

from testbed.engines import warm_server as forking
from testbed.engines.warm_server import NUMBER

STOP_S = 10.0  # how long a server may take to exit once told to


class WarmServerError(RuntimeError):
    """The warm server exited (or never started serving): no child can be forked from it."""


class WarmServer:
    """A process that imported ``modules`` once, with environment ``env``, and forks children."""

    def __init__(self, modules: Sequence[str], env: Mapping[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "testbed.engines.warm_server", str(theirs.fileno()), *modules],
                env=dict(env), stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()])
        self.control = ours
        self._sending = threading.Lock()

    def start(self, module: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              session: bool = False, zygote: bool = False, output: IO[bytes] | None = None) -> WarmProcess:
        """Fork a child that runs ``python -m module argv...``; returns once it runs. ``env``: its
        whole environment (else the server's); ``session``: it leads a new session; ``zygote``: it
        gets a zygote for its own launches (`zygote`); ``output``: where its stdout and stderr go
        (else to temporary files `WarmProcess.communicate` reads)."""
        status, theirs = socket.socketpair()
        out: IO[bytes]
        err: IO[bytes]
        if output is None:
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        else:
            out = err = output
        files = (out, err) if output is None else ()  # what this call opened, and closes on failure
        fields: dict[str, Any] = {"module": module, "argv": list(argv), "session": session, "zygote": zygote}
        if env is not None:
            fields["env"] = dict(env)
        try:
            with theirs:
                request = json.dumps(fields).encode()
                with self._sending:
                    socket.send_fds(self.control, [request], [theirs.fileno(), out.fileno(), err.fileno()])
            pid = _read_number(status)
        except OSError:
            pid = None
        except BaseException:
            for held in (status, *files):
                held.close()
            raise
        if pid is None:
            for held in (status, *files):
                held.close()
            raise WarmServerError(f"the warm server (pid {self.pid}) exited with code {self.exit_code()} "
                                  "(its stderr says why)")
        if output is not None:  # the caller's file stays the caller's: the child has its own descriptor
            return WarmProcess(pid, status, None, None)
        return WarmProcess(pid, status, out, err)

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int:
        """The server's exit code, once it has exited."""
        return self.process.wait()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Stop the server (children still running get SIGINT) and wait for it to exit."""
        self.control.close()
        try:
            self.process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WarmProcess:
    """A child of a `WarmServer`, with the interface of `subprocess.Popen` that callers use."""

    def __init__(self, pid: int, status: socket.socket, out: IO[bytes] | None, err: IO[bytes] | None):
        self.pid = pid
        self.returncode: int | None = None
        self.lost_server = False
        self._status, self._out, self._err = status, out, err

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once the child has exited (negative: the signal that killed it)."""
        if self.returncode is None:
            self._status.settimeout(timeout)
            try:
                code = _read_number(self._status)
            except (TimeoutError, BlockingIOError):  # BlockingIOError: timeout 0 makes the socket non-blocking
                raise subprocess.TimeoutExpired(f"warm child {self.pid}", timeout or 0.0) from None
            self.lost_server = code is None
            self.returncode = 1 if code is None else code
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def communicate(self) -> tuple[str, str]:
        """Wait for the exit, then the child's stdout and stderr (text)."""
        self.wait()
        out, err = (_read_text(handle) if handle is not None else "" for handle in (self._out, self._err))
        if self.lost_server:
            err += "\nerror: the warm server this process was forked from exited before it\n"
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> WarmProcess:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for held in (self._status, self._out, self._err):
            if held is not None:
                held.close()


def _read_number(status: socket.socket) -> int | None:
    """One number from a status socket; None at end of file (the server is gone)."""
    data = b""
    while len(data) < NUMBER.size:
        chunk = status.recv(NUMBER.size - len(data))
        if not chunk:
            return None
        data += chunk
    return NUMBER.unpack(data)[0]


def _read_text(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode(errors="replace")


class Zygote(WarmServer):
    """This process's zygote: a warm server its own warm server forked for it at its start
    (``zygote=True``), so that the training ranks it launches are forked from a process as clean
    as a warm server, with the rank's modules imported (`testbed.kinds.warm_modules`). It stops
    at this process's exit (`testbed.engines.warm_server`)."""

    def __init__(self, control: socket.socket, pid: int):  # not WarmServer's: that starts a server
        self.control, self._pid = control, pid
        self._exit_code: int | None = None
        self._sending = threading.Lock()

    @property
    def pid(self) -> int:
        return self._pid

    def exit_code(self) -> int:
        while self._reap(0) is None:
            pass
        assert self._exit_code is not None  # reaped
        return self._exit_code

    def alive(self) -> bool:
        return self._reap(os.WNOHANG) is None

    def close(self) -> None:
        """Stop the zygote (ranks still running get SIGINT) and reap it; this process's exit does too."""
        forking.close_zygote(self.control, self._pid)

    def _reap(self, options: int) -> int | None:
        """Its exit code once it has exited (read once), None while it runs."""
        if self._exit_code is None:
            try:
                pid, status = os.waitpid(self._pid, options)
            except ChildProcessError:  # reaped by someone else: gone, its code unknown
                pid, status = self._pid, 0
            if pid:
                self._exit_code = os.waitstatus_to_exitcode(status)
        return self._exit_code


_zygote: Zygote | None = None


def zygote() -> Zygote | None:
    """This process's zygote, if its warm server forked it one (``zygote=True``) and it still runs."""
    global _zygote
    if _zygote is None and forking.zygote is not None:
        _zygote = Zygote(*forking.zygote)
    return _zygote if _zygote is not None and _zygote.alive() else None


_servers: dict[tuple, WarmServer] = {}
_servers_guard = threading.Lock()


def warm_server(modules: Sequence[str], env: Mapping[str, str]) -> WarmServer:
    """This process's server for ``modules`` and ``env`` (and the current folder), started on first use."""
    key = (tuple(modules), tuple(sorted(env.items())), os.getcwd())
    with _servers_guard:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = WarmServer(modules, env)
        return server


def close_warm_servers() -> None:
    """Stop every warm server this process started."""
    with _servers_guard:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()


_holds = 0  # how many `servers_kept` blocks are open


@contextmanager
def servers_kept() -> Iterator[None]:
    """Keep the warm servers until the block ends, though the sweeps inside it end: `testbed
    reproduce` runs one scenario's sweep after another, and each would otherwise start its own
    server (7-18 s of imports) and stop it (2.5-5 s) for the same modules and environment."""
    global _holds
    with _servers_guard:
        _holds += 1
    try:
        yield
    finally:
        with _servers_guard:
            _holds -= 1
            last = _holds == 0
        if last:
            close_warm_servers()


def release_warm_servers() -> None:
    """What a sweep's placement calls as it ends: stop the servers, unless `servers_kept` holds them."""
    with _servers_guard:
        held = _holds > 0
    if not held:
        close_warm_servers()


atexit.register(close_warm_servers)
