"""The address of a Ray cluster: resolve ``auto`` as Ray does, and check that something answers.

Used by the ``ray`` engine before it joins a cluster and by the hostfile helpers; kept here, below
the engines, so that `testbed.cluster` needs nothing from them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from testbed.errors import UserError

RAY_CURRENT_CLUSTER = Path("/tmp/ray/ray_current_cluster")


def resolve_auto_address() -> str | None:
    """The address ``ray.init(address='auto')`` would use: $RAY_ADDRESS, else the local head's."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    if RAY_CURRENT_CLUSTER.is_file():
        return RAY_CURRENT_CLUSTER.read_text().strip() or None
    return None


def check_ray_address(address: str, source: str, timeout_s: float = 3.0) -> None:
    """Fail with a clear user error unless something listens at the cluster address."""
    resolved = resolve_auto_address() if address == "auto" else address
    if not resolved:
        raise UserError(f"{source}: engine.address: 'auto' found no running Ray cluster "
                        "(start one with 'ray start --head' or set RAY_ADDRESS)")
    hostport = resolved.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{source}: engine.address: '{address}' is not host:port or ray://host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError:
        raise UserError(f"{source}: engine.address: no Ray cluster answers at {hostport}") from None
