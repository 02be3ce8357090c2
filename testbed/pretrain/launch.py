"""Start a pretrain run's training processes on its engine and stream their events back.

Engines:
  deepspeed  the ``deepspeed`` launcher (``python -m deepspeed.launcher.runner``, the console
             script's module) with ``--num_gpus N --module testbed.pretrain.ds_worker``; on a machine
             without CUDA the launcher and ranks get ``DS_ACCELERATOR=cpu`` (gloo, fp32). A
             ``hostfile`` runs it over several nodes (pdsh; the run folder must be on storage all
             nodes share, since every rank writes its checkpoint shard there).
  local      one process, ``python -m testbed.pretrain.ds_worker`` with a single-rank
             torch.distributed environment, no launcher.
  ray        Ray Train's ``TorchTrainer`` with ``pretrain.ray_workers`` workers on the Ray cluster the
             engine joined; each worker runs the same DeepSpeed loop inside the process group Ray
             Train set up (gloo without GPUs). Shared storage as for a multi-node deepspeed run.

Rank 0 appends events to ``RUN/worker/events.jsonl``; `follow_events` tails that file while the
processes run and hands each event to the driver. The launcher runs in its own process group,
which is killed if the driver leaves early (error or Ctrl-C); ranks also stop by themselves when
the driver process dies (see `testbed.pretrain.ds_worker.driver_alive`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.pretrain.ds_worker import DRIVER_HOST, DRIVER_PID
from testbed.scenario import DeepSpeedEngineConfig, Scenario

WORKER_MODULE = "testbed.pretrain.ds_worker"
POLL_SECONDS = 0.2
Event = dict[str, Any]


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


def worker_environment() -> dict[str, str]:
    """Environment of the training processes: CPU accelerator without CUDA, and who the driver is."""
    import torch

    env = {**os.environ, DRIVER_PID: str(os.getpid()), DRIVER_HOST: socket.gethostname()}
    if not torch.cuda.is_available():
        env["DS_ACCELERATOR"] = "cpu"
    return env


def worker_arguments(run_dir: Path, resume_tag: str | None) -> list[str]:
    return ["--run-dir", str(run_dir.resolve())] + (["--resume-tag", resume_tag] if resume_tag else [])


def deepspeed_command(engine: DeepSpeedEngineConfig, run_dir: Path, resume_tag: str | None, port: int) -> list[str]:
    """The ``deepspeed`` launcher command line for this run."""
    command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(engine.num_procs),
               "--master_port", str(port)]
    if engine.hostfile:
        command += ["--hostfile", engine.hostfile]
    return command + ["--module", WORKER_MODULE, *worker_arguments(run_dir, resume_tag)]


def local_command(run_dir: Path, resume_tag: str | None, port: int) -> tuple[list[str], dict[str, str]]:
    """One training process without a launcher, and its single-rank torch.distributed environment."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return [sys.executable, "-m", WORKER_MODULE, *worker_arguments(run_dir, resume_tag)], env


def run_training(scenario: Scenario, run_dir: Path, resume_tag: str | None, on_event: Callable[[Event], None]) -> None:
    """Run the training processes to the end, passing every event to ``on_event`` as it arrives."""
    worker_dir = run_dir / "worker"
    worker_dir.mkdir(exist_ok=True)
    events_path = worker_dir / "events.jsonl"
    events_path.unlink(missing_ok=True)
    events_path.touch()
    if scenario.engine.type == "ray":
        finished = _run_on_ray(scenario, run_dir, resume_tag)
        follow_events(events_path, finished, on_event)
        finished.raise_error()
        return
    port = free_port()
    if scenario.engine.type == "deepspeed":
        command, extra_env = deepspeed_command(scenario.engine, run_dir, resume_tag, port), {}
    else:
        command, extra_env = local_command(run_dir, resume_tag, port)
    log_path = worker_dir / "launcher.log"
    _stop_previous_launch(worker_dir, run_dir)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, env={**worker_environment(), **extra_env}, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        (worker_dir / "launcher.pid").write_text(str(process.pid))
        try:
            follow_events(events_path, lambda: process.poll() is not None, on_event)
        finally:
            _stop_group(process)
            release_shared_memory(port)
    if process.returncode != 0:
        raise RuntimeError(f"training processes exited with code {process.returncode}; "
                           f"last lines of {log_path}:\n{_tail(log_path)}")


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


def _stop_previous_launch(worker_dir: Path, run_dir: Path) -> None:
    """Kill what is left of an earlier launch for this run (its driver was killed), so that a
    resumed run never shares the checkpoint folder with ranks of the run it replaces."""
    pid_path = worker_dir / "launcher.pid"
    if not pid_path.is_file():
        return
    pid = int(pid_path.read_text())
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        alive_and_ours = str(run_dir.resolve()) in cmdline.read_bytes().decode(errors="replace")
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


def _stop_group(process: subprocess.Popen) -> None:
    # The launcher and its ranks share the session started for the launcher.
    if process.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class _Background:
    """A call running in a thread: ``finished()`` for `follow_events`, then ``raise_error()``."""

    def __init__(self, fn: Callable[[], None]):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as err:  # handed to the driver's thread by raise_error
            self.error = err

    def __call__(self) -> bool:
        return not self.thread.is_alive()

    def raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"Ray Train run failed: {self.error}") from self.error


def _run_on_ray(scenario: Scenario, run_dir: Path, resume_tag: str | None) -> _Background:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from testbed.pretrain.config import PretrainConfig
    from testbed.pretrain.ds_worker import ray_train_loop

    workers = (scenario.pretrain or PretrainConfig()).ray_workers
    use_gpu = ray.cluster_resources().get("GPU", 0) >= workers
    env = {DRIVER_PID: str(os.getpid()), DRIVER_HOST: socket.gethostname(), **({} if use_gpu else {"DS_ACCELERATOR": "cpu"})}
    trainer = TorchTrainer(
        ray_train_loop,
        train_loop_config={"run_dir": str(run_dir.resolve()), "resume_tag": resume_tag, "env": env},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(name="pretrain", storage_path=str((run_dir / "worker" / "ray").resolve())),
    )
    return _Background(trainer.fit)
