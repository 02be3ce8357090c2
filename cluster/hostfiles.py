"""DeepSpeed hostfiles and MPI host lists, from the live Ray cluster or from a file of hosts.

    python -m testbed.cluster.hostfiles --from-ray auto --deepspeed hostfile --mpi hosts.txt
    scontrol show hostnames "$SLURM_JOB_NODELIST" > nodes.txt
    python -m testbed.cluster.hostfiles --from-file nodes.txt --slots 4 --deepspeed hostfile

Formats written:

- DeepSpeed (``deepspeed --hostfile``, the ``engine.hostfile`` of a ``deepspeed`` scenario): one
  ``host slots=N`` line per machine, N processes on it (usually its GPUs).
- MPICH/Hydra host file (``mpiexec -f``): ``host:N`` per line; the same ``host:N`` entries are what
  an ``mpi`` scenario's ``engine.hosts`` list takes (passed as ``mpiexec -hosts``).
- Open MPI host file (``--mpi-flavor openmpi``): ``host slots=N``.

A node's slots are its GPUs, or its CPUs where it has none, unless ``--slots`` fixes them. Ray
nodes that share one address (an emulated cluster on one machine) become one host with their slots
summed, since a launcher starts processes per machine, not per Ray node. An input file lists one
host per line, optionally as ``host slots=N`` or ``host:N``; ``#`` starts a comment.

Every host is checked by `validate_host`: an RFC 1123 host name or an IPv4/IPv6 address, nothing
else. Host names end up on the command lines of ssh, pdsh and mpiexec, so a "host" such as
``-Fevil.cfg`` (an ssh option that reads a config, and runs its ProxyCommand) or ``a;touch x`` is
refused before anything is started; `ssh_probe_command` also ends ssh's options with ``--``.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import UserError

HOST_LINE = re.compile(r"^(?P<host>\S+)(?:\s+slots\s*=\s*(?P<slots>\d+))?$")
HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MAX_HOST_NAME = 253


def validate_host(name: str) -> str:
    """``name`` if it is an RFC 1123 host name (dot-separated labels of letters, digits and '-', no
    label starting or ending with '-', at most 253 characters) or an IPv4/IPv6 address; otherwise
    a `UserError` naming it. Nothing else may reach ssh, pdsh or mpiexec as a host: a leading '-'
    would be read as an option, other characters by a shell."""
    if isinstance(name, str) and "%" not in name:  # no IPv6 scope ids: they take any characters
        try:
            ipaddress.ip_address(name)
            return name
        except ValueError:
            pass
        if 0 < len(name) <= MAX_HOST_NAME and all(HOST_LABEL.fullmatch(label) for label in name.split(".")):
            return name
    shown = repr(name) if len(str(name)) <= 80 else repr(str(name)[:80]) + "..."
    raise UserError(f"host {shown} is not a valid host name or IP address (RFC 1123: dot-separated labels of "
                    "letters, digits and '-', not starting or ending with '-')")


def validate_host_entry(entry: str) -> str:
    """``entry`` if it is ``host`` or ``host:N`` (an ``mpi`` scenario's ``engine.hosts`` item,
    ``mpiexec -hosts``) with a host `validate_host` accepts; otherwise a `UserError` naming it.
    An IPv6 address is taken whole (``fe80::1:4`` is an address, not a host with 4 slots)."""
    validate_host(_split_count(entry)[0])
    return entry


def ssh_probe_command(host: str) -> list[str]:
    """The ssh command that checks passwordless SSH to ``host`` (validated; ``--`` ends the options)."""
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "--", validate_host(host), "true"]


def _split_count(entry: str) -> tuple[str, str | None]:
    """``host:N`` as (host, "N"); anything else, an IPv6 address included, as (entry, None)."""
    host, colon, count = entry.rpartition(":")
    if not colon or not count.isdigit() or ":" in host:
        return entry, None
    return host, count


@dataclass(frozen=True)
class Host:
    """One machine and how many processes a launcher starts on it."""

    name: str
    slots: int

    def __post_init__(self) -> None:
        validate_host(self.name)


def hosts_from_nodes(nodes: Iterable[dict[str, Any]], slots: int | None = None) -> list[Host]:
    """Hosts from Ray node records (`ray.nodes()`), alive nodes only, head first, merged by address."""
    merged: dict[str, int] = {}
    alive = [n for n in nodes if n.get("Alive")]
    for node in sorted(alive, key=lambda n: "node:__internal_head__" not in n.get("Resources", {})):
        resources = node.get("Resources", {})
        count = slots or int(resources.get("GPU", 0)) or int(resources.get("CPU", 0))
        merged[node["NodeManagerAddress"]] = merged.get(node["NodeManagerAddress"], 0) + count
    return [Host(name, count) for name, count in merged.items() if count > 0]


def hosts_from_ray(address: str = "auto", slots: int | None = None) -> list[Host]:
    """Hosts of a live Ray cluster: this driver's if Ray is initialised, else the one at ``address``."""
    import ray

    if ray.is_initialized():
        return _non_empty(hosts_from_nodes(ray.nodes(), slots), f"Ray cluster at {address}")
    from .addresses import check_ray_address, resolve_auto_address
    from .local import gcs_tables

    check_ray_address(address, "--from-ray")
    resolved = resolve_auto_address() if address == "auto" else address
    assert resolved is not None  # check_ray_address refused an address that does not resolve
    if resolved.startswith("ray://"):
        raise UserError(f"--from-ray: {address}: give the cluster's GCS address (host:6379), "
                        "not a ray:// client address")
    node_table, _ = gcs_tables(resolved)
    return _non_empty(hosts_from_nodes(node_table, slots), f"Ray cluster at {resolved}")


def hosts_from_file(path: str | Path, slots: int | None = None) -> list[Host]:
    """Hosts listed in a file: ``host``, ``host slots=N`` or ``host:N`` per line; '#' comments."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such host file")
    merged: dict[str, int] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = HOST_LINE.match(line)
        host, colon = _split_count(line.split()[0])
        try:
            validate_host(host)  # first, so that a bad host is refused by name, whatever follows it
        except UserError as err:
            raise UserError(f"{path}:{number}: {err}") from None
        if match is None or (colon is not None and match["slots"] is not None):
            raise UserError(f"{path}:{number}: expected 'host', 'host slots=N' or 'host:N', got {line!r}")
        count = slots or int(colon or match["slots"] or 1)
        merged[host] = merged.get(host, 0) + count
    return _non_empty([Host(name, count) for name, count in merged.items()], str(path))


def _non_empty(hosts: list[Host], source: str) -> list[Host]:
    if not hosts:
        raise UserError(f"{source}: no hosts with free slots")
    return hosts


def deepspeed_hostfile(hosts: Iterable[Host]) -> str:
    """DeepSpeed's hostfile text."""
    return "".join(f"{h.name} slots={h.slots}\n" for h in hosts)


def mpi_hostfile(hosts: Iterable[Host], flavor: str = "mpich") -> str:
    """An MPI host file: MPICH/Hydra ``host:N`` lines, or Open MPI ``host slots=N`` lines."""
    if flavor == "openmpi":
        return deepspeed_hostfile(hosts)
    if flavor != "mpich":
        raise UserError(f"--mpi-flavor: '{flavor}' is not 'mpich' or 'openmpi'")
    return "".join(f"{h.name}:{h.slots}\n" for h in hosts)


def mpi_hosts(hosts: Iterable[Host]) -> list[str]:
    """The ``engine.hosts`` list of an ``mpi`` scenario (``mpiexec -hosts h1:N,h2:M``)."""
    return [f"{h.name}:{h.slots}" for h in hosts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster.hostfiles", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-ray", metavar="ADDRESS", help="a live Ray cluster: 'auto' or host:port")
    source.add_argument("--from-file", type=Path, metavar="FILE", help="a file of hosts")
    parser.add_argument("--slots", type=int, help="processes per host (default: its GPUs, else its CPUs)")
    parser.add_argument("--deepspeed", type=Path, metavar="OUT", help="write a DeepSpeed hostfile here")
    parser.add_argument("--mpi", type=Path, metavar="OUT", help="write an MPI host file here")
    parser.add_argument("--mpi-flavor", choices=("mpich", "openmpi"), default="mpich")
    args = parser.parse_args(argv)
    try:
        hosts = (hosts_from_ray(args.from_ray, args.slots) if args.from_ray
                 else hosts_from_file(args.from_file, args.slots))
        outputs = {args.deepspeed: deepspeed_hostfile(hosts), args.mpi: mpi_hostfile(hosts, args.mpi_flavor)}
        for path, text in outputs.items():
            if path is not None:
                path.write_text(text)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(" ".join(mpi_hosts(hosts)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
