"""Dense LAPACK calls that Ctrl-C can abandon: a large one runs in a child process.

scipy's LAPACK wrappers hold the GIL for the whole call, so a SIGINT that arrives during a dense
eigendecomposition (minutes at n = 4096 on two cores) is handled only when it returns: a thread
cannot help, as the main thread would not run its handler either. numpy's wrappers release the
GIL, but they call other LAPACK drivers and would change the numbers. So from `ABANDON_FROM`
rows on, `abandonable` runs the same scipy call in a spawned child process while the main thread
waits on a pipe, where Python runs the signal handler at once: a KeyboardInterrupt kills the child
(nothing is left running) and propagates. The child computes with the same library and the same
arguments, so the result is the same array.

Smaller calls, calls outside the main thread (which never receives signals) and calls where
SIGINT is ignored run in this process, as before.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# From this order on a dense decomposition takes seconds, and starting the child (spawn, imports,
# the matrix through a pipe) costs less than the call. Measured here (two cores, scipy 1.x): eigvalsh
# at n = 2048 took 0.5 s in process and 1.2 s through the child on an idle machine, and 3000 x 3000
# took 55 s while other jobs shared the cores; at n = 1024 the child's 0.7 s would cost 10x the call.
ABANDON_FROM = 2_000


def abandonable(function: Callable[..., Any], matrix: np.ndarray, **kwargs: Any) -> Any:
    """``function(matrix, **kwargs)``, in a child process when ``matrix`` has `ABANDON_FROM` rows or
    more and this is the main thread, so that Ctrl-C ends it at once. ``function`` must be
    importable by name (a library function), and its result picklable."""
    if (matrix.shape[0] < ABANDON_FROM or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) == signal.SIG_IGN):
        return function(matrix, **kwargs)
    context = multiprocessing.get_context("spawn")  # never fork: the parent may hold threads (Ray, BLAS)
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_serve, args=(sender, function, matrix, kwargs), daemon=True)
    child.start()
    sender.close()  # the child holds the only writer: a child that dies ends recv() with EOFError
    try:
        failed, value = receiver.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"{getattr(function, '__name__', function)} ended without a result "
                           f"(its process exited with code {child.exitcode})") from None
    finally:
        if child.is_alive():  # interrupted: the child would compute on for minutes
            child.kill()
        child.join()
        receiver.close()
    if failed:
        raise value
    return value


def _serve(sender, function: Callable[..., Any], matrix: np.ndarray, kwargs: dict[str, Any]) -> None:
    """The child: compute, send (failed, result or exception) back. Ctrl-C at the terminal reaches
    the whole process group; the parent decides, so the child ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = (False, function(matrix, **kwargs))
    except Exception as err:  # sent back and raised in the parent, as if the call had been local
        result = (True, err)
    sender.send(result)
    sender.close()
