"""Process trees on Linux, read from /proc and set with ``prctl``: what runs below a process, when
a process started, and the kernel settings that keep a tree together (a subreaper adopts the
orphans below it; a parent-death signal stops a child with its parent). Elsewhere they find
nothing and set nothing. Used by the engines' launches (`testbed.engines.processes`), the warm
servers (`testbed.engines.warm_server`) and the Ray engine's clean-up."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def start_time(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (/proc); -1 if it does not run (or
    there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


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
