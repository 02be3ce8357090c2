"""The ``deepspeed`` engine: training programs under the ``deepspeed`` launcher.

``num_procs`` ranks on this machine, or over the hosts of ``hostfile`` (the launcher reaches them
by passwordless SSH through pdsh; the run folder must then be on storage every host shares, since
every rank writes its checkpoint shard there). Calls other than training programs run in the
driver.
"""

from __future__ import annotations

import subprocess
from typing import Any

from testbed.engines.base import InProcessEngine
from testbed.engines.config import DeepSpeedEngineConfig
from testbed.engines.jobs import DistributedProgram, Job
from testbed.errors import UserError


class DeepSpeedEngine(InProcessEngine):
    """Launches training programs with the ``deepspeed`` launcher."""

    name = "deepspeed"
    settings: DeepSpeedEngineConfig

    def capabilities(self) -> frozenset[str]:
        return self.settings.capabilities()

    def start(self) -> None:
        # At start, not in `validate`: checking a hostfile means connecting to its hosts.
        if self.settings.hostfile:
            check_hosts_reachable(self.settings.hostfile)

    def launch(self, program: DistributedProgram) -> Job:
        from testbed.engines.processes import deepspeed_job

        return deepspeed_job(program, self.settings.num_procs, self.settings.hostfile)

    def describe(self) -> dict[str, Any]:
        return {"type": self.name, "num_procs": self.settings.num_procs}


def check_hosts_reachable(hostfile: str) -> None:
    """The deepspeed launcher reaches every host of a hostfile, localhost included, by passwordless
    SSH (pdsh): check that first, so a missing key is one line here, not a launcher traceback."""
    from testbed.cluster.hostfiles import hosts_from_file, ssh_probe_command

    for host in hosts_from_file(hostfile):
        command = ssh_probe_command(host.name)  # validated, and "--" before it: never an ssh option
        try:
            reached = subprocess.run(command, capture_output=True, timeout=15).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            reached = False
        if not reached:
            raise UserError(f"{hostfile}: engine.hostfile: host {host.name!r} is not reachable by "
                            "passwordless SSH, which the deepspeed launcher needs; set up SSH keys, or drop "
                            "engine.hostfile to run num_procs processes on this machine")
