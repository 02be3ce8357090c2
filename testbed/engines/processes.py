"""Training programs as local child processes: one rank alone, or the ``deepspeed`` launcher.

The launcher (or the single rank) runs in its own session, so the whole process group is stopped
when the driver leaves early (error or Ctrl-C), and its pid is kept in ``work_dir/launcher.pid``,
so that a resumed run first stops what is left of an earlier launch whose driver was killed.

Launch recipes (what `single_rank_job` and `deepspeed_job` run)::

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python -m MODULE ARGS...
    python -m deepspeed.launcher.runner --num_gpus N --master_port P [--hostfile F] --module MODULE ARGS...

Without CUDA the ranks get ``DS_ACCELERATOR=cpu`` (gloo, fp32).

Stopping a launch waits until every process of its session has exited, not only the launcher
(the deepspeed launcher's own children outlived it by seconds). The single rank of a sweep's
variant is forked from the variant's zygote (`testbed.engines.warm.zygote`) rather than started
afresh: the same module, arguments, environment and session, without 2-3 s of imports.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.engines.jobs import DistributedProgram, Job
from testbed.engines.proctree import process_table, start_time

if TYPE_CHECKING:
    from testbed.engines.warm import WarmProcess

POLL_SECONDS = 0.2


def free_port() -> int:
    """A TCP port nothing listens on right now (for torch.distributed's rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def release_shared_memory(port: int, folder: Path = Path("/dev/shm")) -> None:
    """Delete the shared-memory all-reduce buffers DeepSpeed's CPU backend left for this rendezvous.

    DeepSpeed names them after the master address and port and never unlinks them: each CPU run
    would otherwise keep about 70 MB per process in /dev/shm (RAM) until the machine reboots.
    """
    for buffer in folder.glob(f"deepspeed_*_{port}_*"):
        buffer.unlink(missing_ok=True)


def accelerator_environment() -> dict[str, str]:
    """``DS_ACCELERATOR=cpu`` on a machine without CUDA, so DeepSpeed runs on gloo."""
    import torch

    return {} if torch.cuda.is_available() else {"DS_ACCELERATOR": "cpu"}


class ProcessJob(Job):
    """A launcher (or a lone rank) started in its own session, with its output in a log file."""

    def __init__(self, command: list[str], env: dict[str, str], work_dir: Path, port: int, warm: bool = False):
        """``command``: ``python -m MODULE ARGS...``; ``warm``: forked from this process's zygote
        where it has one, as ``command`` would start (the same module, arguments and environment)."""
        from testbed.engines.warm import zygote

        self.work_dir, self.port = work_dir, port
        self.log_path = work_dir / "launcher.log"
        stop_previous_launch(work_dir)
        server = zygote() if warm else None
        self.process: subprocess.Popen | WarmProcess
        with open(self.log_path, "ab") as log:
            if server is not None:
                self.process = server.start(command[2], command[3:], env={**os.environ, **env}, session=True,
                                            output=log)
            else:
                self.process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        (work_dir / "launcher.pid").write_text(f"{self.process.pid} {start_time(self.process.pid)}")

    def finished(self) -> bool:
        return self.process.poll() is not None

    def stop(self) -> None:
        stop_group(self.process)
        release_shared_memory(self.port)

    def raise_for_status(self) -> None:
        if self.process.returncode != 0:
            raise RuntimeError(f"training processes exited with code {self.process.returncode}; "
                               f"last lines of {self.log_path}:\n{tail(self.log_path)}")


def single_rank_job(program: DistributedProgram) -> Job:
    """One rank with a single-process torch.distributed environment, no launcher: forked from this
    process's zygote where it has one (a sweep's variant, `testbed.engines.warm.zygote`), else a
    fresh interpreter."""
    port = free_port()
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **accelerator_environment(), **program.env}
    return ProcessJob([sys.executable, "-m", program.module, *program.args], env, program.work_dir, port,
                      warm=True)


def deepspeed_job(program: DistributedProgram, num_procs: int, hostfile: str | None) -> Job:
    """``num_procs`` ranks under the ``deepspeed`` launcher (over the hosts of ``hostfile``, by pdsh)."""
    port = free_port()
    command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(num_procs),
               "--master_port", str(port)]
    if hostfile:
        command += ["--hostfile", hostfile]
    command += ["--module", program.module, *program.args]
    return ProcessJob(command, {**accelerator_environment(), **program.env}, program.work_dir, port)


def stop_previous_launch(work_dir: Path) -> None:
    """Kill what is left of an earlier launch from ``work_dir`` (its driver was killed), so that a
    resumed run never shares its checkpoint folder with ranks of the run it replaces."""
    pid_path = work_dir / "launcher.pid"
    if not pid_path.is_file():
        return
    # The pid and the start time of the process it named: that process, not another that got its pid.
    recorded, _, started = pid_path.read_text().partition(" ")
    pid = int(recorded)
    cmdline = Path(f"/proc/{pid}/cmdline")
    if started:
        alive_and_ours = start_time(pid) == int(started)
    else:  # a folder of a version that kept the pid alone
        try:
            alive_and_ours = str(work_dir.parent.resolve()) in cmdline.read_bytes().decode(errors="replace")
        except OSError:
            alive_and_ours = False
    if alive_and_ours:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10.0
        while cmdline.exists() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    pid_path.unlink(missing_ok=True)


def stop_group(process: subprocess.Popen | WarmProcess, grace_s: float = 2.0) -> None:
    """SIGTERM the session a launcher and its ranks share, SIGKILL what is left of it after
    ``grace_s``, and return once every process of the session has exited. The ranks have nothing
    to save: a run continues from its last complete checkpoint."""
    for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if not _group_alive(process):
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while _group_alive(process) and time.monotonic() < deadline:
            time.sleep(0.05)


def _group_alive(process: subprocess.Popen | WarmProcess) -> bool:
    """Whether any process of the session ``process`` leads still runs (the leader is reaped)."""
    leader_running = process.poll() is None
    table = process_table()
    if not table:  # no /proc: only the leader can be seen
        return leader_running
    return any(pgrp == process.pid and state != "Z" for state, _, pgrp in table.values())


def tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
