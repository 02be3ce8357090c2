"""A warm server: a process that imports heavy modules once, then forks one child per request, each
child running a module as ``python -m MODULE ARGS...`` would (its ``__main__``, its exit code), so
that the child starts in milliseconds instead of paying the interpreter's start-up and the imports.
Started, asked and stopped by `testbed.engines.warm`::

    python -m testbed.engines.warm_server CONTROL_FD MODULE...

Protocol, over the control socket (one end of an ``AF_UNIX`` ``SOCK_SEQPACKET`` pair): each request
is one message, JSON ``{"module": ..., "argv": [...]}``, carrying three file descriptors: the
request's status socket and the child's stdout and stderr. The server forks, writes the child's
pid on the status socket, and, once it has reaped the child, its exit code (negative: the signal
that killed it), as signed 8-byte numbers. It stops at the control socket's end of file (its
client closed it, or died); a child still running then gets its parent-death signal (SIGINT, as
Ctrl-C: it stops as an interrupted run does). Optional fields: ``"env"``, the child's whole
environment (else the server's); ``"session": true``, the child leads a new session (as
``start_new_session`` does); ``"zygote": true``, the child first forks a server of its own, a
*zygote*, still as clean as this server (no thread, nothing computed), that later forks the
training ranks the child launches (`testbed.engines.warm.zygote`): a rank then starts in
milliseconds with torch and DeepSpeed imported, where a fresh ``python -m`` takes 2-3 s.

Fork safety: the server imports and computes nothing else, so no Python thread and no torch
intra-op pool exists when it forks (it refuses to serve if an import started a Python thread);
numpy's BLAS pool, started on import, is re-created in the child by the library's own fork
handler. The child gets the server's environment (the client starts one server per environment),
an ignored SIGINT back as the server inherited it, a fresh random state (``random`` reseeds itself
after a fork; numpy's legacy global generator is reseeded here) and stdin from /dev/null.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from testbed.engines.proctree import set_parent_death_signal

NUMBER = struct.Struct("q")  # pids and exit codes on a status socket
MAX_REQUEST = 1 << 20
ZYGOTE_STOP_S = 10.0
# In a child forked with "zygote": true, its zygote: (control socket, pid) (`testbed.engines.warm.zygote`).
zygote: tuple[socket.socket, int] | None = None


def serve(control_fd: int, modules: list[str], original_sigint: Any) -> dict[str, Any] | None:
    """Import ``modules``, then fork a child per request until the control socket closes. Returns
    None in the server once it should exit, and the request in each child (only there)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional module: the child imports it itself and says what is missing
            continue
    threads = [thread.name for thread in threading.enumerate() if thread is not threading.main_thread()]
    if threads:
        print(f"warm server: importing {modules} started threads {threads}: forking now would copy them "
              "half-done", file=sys.stderr)
        return None
    return _serve(socket.socket(fileno=control_fd), original_sigint)


def _serve(control: socket.socket, original_sigint: Any) -> dict[str, Any] | None:
    """Fork a child per request on ``control`` until it closes (`serve`, after the imports)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the selector through wake_w
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    death_signal = signal.SIGTERM if original_sigint == signal.SIG_IGN else signal.SIGINT
    server = os.getpid()
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                os.read(wake_r, 4096)
                _reap(children)
                continue
            message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 3)
            if not message:  # end of file: the client is gone
                return None
            status, out, err = (socket.socket(fileno=fds[0]), *fds[1:])
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                selector.close()
                for held in (control, status, *children.values()):
                    held.close()
                for fd in (wake_r, wake_w):
                    os.close(fd)
                _become_child(server, out, err, original_sigint, death_signal)
                request: dict[str, Any] = json.loads(message)
                _prepare(request, original_sigint)
                return request
            os.close(out)
            os.close(err)
            try:
                status.sendall(NUMBER.pack(pid))
                children[pid] = status
            except OSError:  # the client stopped waiting (Ctrl-C) before the child started
                os.kill(pid, signal.SIGKILL)
                status.close()


def _reap(children: dict[int, socket.socket]) -> None:
    """Send the exit code of every child that has ended to its client."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status = children.pop(pid, None)
        if status is not None:
            try:
                status.sendall(NUMBER.pack(os.waitstatus_to_exitcode(wait_status)))
            except OSError:  # the client is gone
                pass
            status.close()


def _become_child(server: int, out: int, err: int, original_sigint: Any, death_signal: int) -> None:
    """In the forked child: the signals and files a freshly started process would have."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, original_sigint)
    set_parent_death_signal(death_signal)
    if os.getppid() != server:  # the server exited between the fork and the line above
        os.kill(os.getpid(), death_signal)
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # a fresh process seeds it from the OS
    # Last, with the child's own stderr in place: a SIGINT sent since the fork arrives now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _prepare(request: dict[str, Any], original_sigint: Any) -> None:
    """In the forked child, before it runs anything: the environment, session and zygote it asked for."""
    if "env" in request:
        os.environ.clear()
        os.environ.update(request["env"])
    if request.get("session"):
        os.setsid()
    if request.get("zygote"):
        _fork_zygote(original_sigint)


def _fork_zygote(original_sigint: Any) -> None:
    """Fork this child's zygote: a server for its later launches, forked now, while this process is
    as clean as the server it came from. The zygote stops at its control socket's end of file (this
    process closes it at exit, `close_zygote`) or, by its parent-death signal, with it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        ours.close()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as the server: Ctrl-C is for the ranks, not for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:  # the parent exited between the fork and the line above
            os._exit(0)
        request = _serve(theirs, original_sigint)
        if request is None:
            os._exit(0)
        run_request(request)
    theirs.close()
    # Kept on the module under its own name: the server runs this file as __main__, and the
    # child's launches look for the zygote there (`testbed.engines.warm.zygote`).
    named: Any = importlib.import_module("testbed.engines.warm_server")
    named.zygote = ours, pid
    atexit.register(close_zygote, ours, pid)


def close_zygote(control: socket.socket, pid: int) -> None:
    """At this process's exit: end its zygote's control socket and reap the zygote (ranks it still
    runs get SIGINT), SIGKILL after `ZYGOTE_STOP_S`."""
    control.close()
    deadline = time.monotonic() + ZYGOTE_STOP_S
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)
    except ChildProcessError:  # already reaped (`testbed.engines.warm.Zygote.alive`)
        pass


def run_request(request: dict[str, Any]) -> NoReturn:
    """Run the requested module as ``python -m`` does (as ``__main__``, with ``sys.argv`` set) and
    exit as the interpreter does: the exit code of its SystemExit, a traceback and 1 for an error,
    by SIGINT for an uncaught KeyboardInterrupt; non-daemon threads joined, atexit handlers run,
    output flushed. What it skips is tearing down the modules, which in a forked child writes to
    (so copies) every page it shares with the server: seconds of a variant's time for nothing."""
    sys.argv = [request["module"], *request["argv"]]
    sys.modules.pop(request["module"], None)  # as in a fresh process, where it runs as __main__ alone
    interrupted = False
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_request:
        code = _exit_code(exit_request.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 1, True
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter runs first at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:  # as CPython exits on an uncaught KeyboardInterrupt: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_code(code: object) -> int:
    """The exit code ``sys.exit(code)`` gives (a message is printed, and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    # Ctrl-C on a terminal reaches every process of the group: the server ignores it (its client
    # passes it on to the children it wants stopped), and gives its children SIGINT as it found it.
    sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Blocked as well as ignored: a SIGINT sent to a child between its fork and `_become_child` then
    # stays pending until the child has its own handler back, instead of being dropped (Linux queues
    # a blocked signal even while it is ignored); a forked child's pending set starts empty.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    child_request = serve(int(sys.argv[1]), sys.argv[2:], sigint)
    if child_request is not None:
        run_request(child_request)
