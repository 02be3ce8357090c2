"""An MPI rank of the `mpi` engine: ``python -m testbed.engines.mpi_worker DRIVER_HOST PORT``.

Rank 0 connects to the driver (authkey from ``TESTBED_MPI_AUTHKEY``), then every rank loops: rank 0
receives ``(fn, args)`` and broadcasts it, all ranks run ``fn(comm, *args)``, rank 0 sends ``("ok", result)`` back.
``None`` ends the loop. An exception on any rank prints its traceback and aborts the whole job,
since its peers may be blocked waiting for it.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from multiprocessing.connection import Client


def serve(host: str, port: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    connection = (Client((host, port), authkey=bytes.fromhex(os.environ["TESTBED_MPI_AUTHKEY"]))
                  if comm.rank == 0 else None)
    while True:
        task = comm.bcast(pickle.loads(connection.recv_bytes()) if connection is not None else None, root=0)  # rank 0
        if task is None:
            break
        fn, args = task
        try:
            result = fn(comm, *args)
        except BaseException:
            text = traceback.format_exc()
            print(f"rank {comm.rank}: {text}", file=sys.stderr, flush=True)
            if connection is not None:  # rank 0
                connection.send_bytes(pickle.dumps(("error", text)))
            comm.Abort(1)
        if connection is not None:  # rank 0
            connection.send_bytes(pickle.dumps(("ok", result)))
    if connection is not None:
        connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
