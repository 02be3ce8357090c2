"""Start a pretrain run's training processes through the engine and stream their events back.

The training program is `testbed.pretrain.ds_worker` (``python -m`` it, or its ``main``): the
engine's `launch` primitive starts its ranks (the ``deepspeed`` launcher, one local process, or
Ray Train workers; see `testbed.engines`), and this module only says what to run and follows what
it writes. Rank 0 appends events to ``RUN/worker/events.jsonl``; `follow_events` tails that file
while the program runs and hands each event to the driver. Whatever the engine started is stopped
if the driver leaves early (error or Ctrl-C); ranks also stop by themselves when the driver process
dies (see `testbed.pretrain.ds_worker.driver_alive`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.engines.base import Engine
from testbed.engines.jobs import DistributedProgram
from testbed.pretrain.ds_worker import (
    DRIVER_HOST,
    DRIVER_PID,
    clear_reported_user_errors,
    raise_reported_user_error,
)

WORKER_MODULE = "testbed.pretrain.ds_worker"
POLL_SECONDS = 0.2
Event = dict[str, Any]


def training_program(run_dir: Path, resume_tag: str | None, ranks: int) -> DistributedProgram:
    """The training ranks of a run: ds_worker on the run folder, told who the driver is."""
    args = ["--run-dir", str(run_dir.resolve())] + (["--resume-tag", resume_tag] if resume_tag else [])
    env = {DRIVER_PID: str(os.getpid()), DRIVER_HOST: socket.gethostname()}
    return DistributedProgram(WORKER_MODULE, tuple(args), run_dir / "worker", ranks, env)


def run_training(engine: Engine, program: DistributedProgram, on_event: Callable[[Event], None]) -> None:
    """Run ``program`` on ``engine`` to the end, passing every event to ``on_event`` as it arrives."""
    program.work_dir.mkdir(exist_ok=True)
    events_path = program.work_dir / "events.jsonl"
    events_path.unlink(missing_ok=True)
    events_path.touch()
    clear_reported_user_errors(program.work_dir)
    job = engine.launch(program)
    try:
        follow_events(events_path, job.finished, on_event)
    finally:
        job.stop()
    try:
        job.raise_for_status()
    except Exception:
        raise_reported_user_error(program.work_dir)  # a rank's one-line user error (a forged checkpoint)
        raise


def follow_events(path: Path, finished: Callable[[], bool], on_event: Callable[[Event], None]) -> None:
    """Hand each complete line of ``path`` to ``on_event`` until ``finished()`` and the file is drained."""
    with open(path) as events:
        pending = ""
        while True:
            done = finished()
            pending += events.read()
            *lines, pending = pending.split("\n")
            for line in lines:
                if line.strip():
                    on_event(json.loads(line))
            if done:
                return
            time.sleep(POLL_SECONDS)
