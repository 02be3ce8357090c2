"""Fault injection for testing crash recovery with real process deaths.

``TESTBED_KILL_AFTER_RECORDS=N`` makes the driver SIGKILL itself right after writing its N-th
metrics record, wherever that falls between checkpoints; `testbed resume` must then finish the
run with the numbers of an uninterrupted one. Unset, it costs one dictionary lookup per record.
"""

from __future__ import annotations

import os
import signal

KILL_AFTER_RECORDS = "TESTBED_KILL_AFTER_RECORDS"


def maybe_kill(records_written: int) -> None:
    """SIGKILL this process if the kill point has been reached."""
    target = os.environ.get(KILL_AFTER_RECORDS)
    if target and records_written >= int(target):
        os.kill(os.getpid(), signal.SIGKILL)
