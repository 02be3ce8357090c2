"""Training programs as local child processes: one rank alone, or the ``deepspeed`` launcher.

The launcher (or the single rank) runs in its own session, so the whole process group is stopped
when the driver leaves early (error or Ctrl-C), and its pid is kept in ``work_dir/launcher.pid``,
so that a resumed run first stops what is left of an earlier launch whose driver was killed.

Launch recipes (what `single_rank_job` and `deepspeed_job` run)::

    RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python -m MODULE ARGS...
    python -m deepspeed.launcher.runner --num_gpus N --master_port P [--hostfile F] --module MODULE ARGS...

Without CUDA the ranks get ``DS_ACCELERATOR=cpu`` (gloo, fp32).

Stopping a launch waits until every process of its session has exited, not only the launcher
(the deepspeed launcher's own children outlived it by seconds). The process-tree helpers at the
end (`set_child_subreaper`, `stop_leftovers`) let an engine that started Ray make sure no Ray
process outlives it either; `set_parent_death_signal` stops a warm server's children with it
(`testbed.engines.warm_server`). They read ``/proc`` or call ``prctl`` (Linux); elsewhere they do
nothing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.engines.jobs import DistributedProgram, Job

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


def start_time(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (/proc); -1 if it does not run (or
    there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


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


# process trees (Linux /proc) -------------------------------------------------------------------
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def process_table() -> dict[int, tuple[str, int, int]]:
    """``pid -> (state, ppid, pgrp)`` of every process, from /proc (empty where there is none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    table = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ", comm may hold anything
        table[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
    return table


def descendants(pid: int | None = None) -> set[int]:
    """Every process below ``pid`` (default: this process), zombies included."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for child, (_, parent, _) in process_table().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def set_child_subreaper(enabled: bool) -> bool:
    """Make orphaned descendants of this process its children rather than init's (Linux), so that
    they can still be found below it; whether that is in effect."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) == 0 and enabled
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(sig: int) -> bool:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux); whether that
    is in effect."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def command_line(pid: int) -> str:
    """The command line of ``pid`` ("" for a zombie or a process that is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def stop_leftovers(keep: Iterable[int], belongs: Callable[[str], bool], grace_s: float = 1.0) -> list[int]:
    """Stop the processes below this one that ``keep`` does not name and whose command line
    ``belongs`` claims: wait ``grace_s`` for them to exit, SIGKILL the rest, reap those that are
    this process's children. Returns the pids that had to be killed."""
    kept = set(keep)
    targets = {pid for pid in descendants() - kept if belongs(command_line(pid))}
    deadline = time.monotonic() + grace_s
    while _running(targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = sorted(_running(targets))
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5.0
    while _running(targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Orphans adopted through the subreaper are this process's children: reap those that have
    # exited, so that none is left a zombie.
    for pid, (state, parent, _) in process_table().items():
        if parent == os.getpid() and pid not in kept and state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    return killed


def _running(pids: set[int]) -> set[int]:
    table = process_table()
    return {pid for pid in pids if pid in table and table[pid][0] != "Z"}
