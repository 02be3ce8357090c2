"""The ``mpi`` engine: a pool of ``mpiexec -n N`` mpi4py ranks that run each call together (SPMD).

`MpiEngine.start` launches ``mpiexec -n N python -m testbed.engines.mpi_worker HOST PORT`` and
waits for rank 0 to connect back over an authenticated socket (`multiprocessing.connection`).
`spmd(fn, *args)` sends ``(fn, args)`` to rank 0, which broadcasts it; every rank runs
``fn(comm, *args)`` (the function talks to its peers through ``comm``, ``mpi4py.MPI.COMM_WORLD``)
and rank 0 sends its result back. Other calls (`map`) run in the driver. The ranks live for the
whole run, so a run pays the start-up of N Python processes once, not per chunk. A rank that
raises prints its traceback and aborts the job; the driver then raises with the end of mpiexec's
output.

Launch recipe (what `start` runs; ``hosts`` adds ``-hosts h1,h2``)::

    mpiexec -n 4 python -m testbed.engines.mpi_worker DRIVER_HOST PORT   # TESTBED_MPI_AUTHKEY in env
"""

from __future__ import annotations

import os
import pickle
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any, BinaryIO

from testbed.engines.base import Engine
from testbed.engines.config import MpiEngineConfig
from testbed.errors import UserError

AUTHKEY_ENV = "TESTBED_MPI_AUTHKEY"
CONNECT_TIMEOUT_S = 180.0


def find_mpiexec() -> str:
    """The mpiexec next to this Python (the PyPI ``mpich`` package puts it there), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if not found:
        raise UserError("engine.type: 'mpi' needs mpiexec: pip install 'testbed[mpi]' (mpich and mpi4py)")
    return found


class MpiEngine(Engine):
    """Runs each call on all ranks of a persistent ``mpiexec`` job; returns rank 0's result."""

    name = "mpi"
    settings: MpiEngineConfig

    @classmethod
    def build(cls, settings: MpiEngineConfig, needs: frozenset[str], parallel_tasks: int, quiet: bool) -> Engine:
        return cls(settings, quiet)

    def __init__(self, settings: MpiEngineConfig, quiet: bool = False):
        super().__init__(settings)
        self.num_procs, self.hosts, self.quiet = settings.num_procs, list(settings.hosts), quiet
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._log: BinaryIO | None = None

    def start(self) -> None:
        authkey = secrets.token_bytes(32)
        host = socket.gethostname() if self.hosts else "127.0.0.1"
        listener = Listener(("0.0.0.0" if self.hosts else host, 0), authkey=authkey)
        command = [find_mpiexec(), "-n", str(self.num_procs)]
        if self.hosts:
            command += ["-hosts", ",".join(self.hosts)]
        command += [sys.executable, "-m", "testbed.engines.mpi_worker", host, str(listener.address[1])]
        self._log = tempfile.TemporaryFile()
        env = {**os.environ, AUTHKEY_ENV: authkey.hex()}
        # In a session of its own, so that mpiexec and every rank it starts are stopped together.
        self._process = subprocess.Popen(command, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            self._connection = self._accept(listener)
        finally:
            listener.close()

    def _accept(self, listener: Listener) -> Connection:
        """Wait for rank 0, failing early if mpiexec exits first."""
        assert self._process is not None  # launched by start
        accepted: list = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        thread.start()
        waited = 0.0
        while not accepted:
            thread.join(0.2)
            waited += 0.2
            if self._process.poll() is not None or waited > CONNECT_TIMEOUT_S:
                self.shutdown()
                raise RuntimeError(f"mpiexec did not start its ranks: {self._output_tail()}")
        return accepted[0]

    def workers(self) -> int:
        return self.num_procs

    def spmd(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._connection is not None  # connected by start
        try:
            # Plain pickle: Connection.send would use torch's shared-memory reducers, whose file
            # descriptors another process (rank 0) cannot fetch from this one.
            self._connection.send_bytes(pickle.dumps((fn, args)))
            status, value = pickle.loads(self._connection.recv_bytes())
        except (EOFError, OSError):
            self._stop_process()
            raise RuntimeError(f"an MPI rank failed: {self._output_tail()}") from None
        if status == "error":
            raise RuntimeError(f"an MPI rank raised:\n{value}")
        return value

    def shutdown(self) -> None:
        if self._connection is not None:
            try:
                self._connection.send_bytes(pickle.dumps(None))
            except OSError:
                pass
            self._connection.close()
            self._connection = None
        self._stop_process()

    def abort(self) -> None:
        """Interrupted: stop mpiexec and its ranks now, without waiting for the call in flight."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._stop_process(timeout_s=0.0)

    def _stop_process(self, timeout_s: float = 30.0) -> None:
        """Wait for mpiexec to exit (it does once the ranks leave their loop), else stop its session."""
        from testbed.engines.processes import stop_group

        if self._process is not None:
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
            stop_group(self._process, grace_s=1.0)  # the ranks too, also when mpiexec exited first
            self._process = None

    def _output_tail(self, chars: int = 3000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-chars:]

    def describe(self) -> dict[str, Any]:
        return {"type": self.name, "ranks": self.num_procs, "hosts": self.hosts or ["localhost"]}
