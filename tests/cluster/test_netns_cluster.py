"""Three hosts in network namespaces, joined into a Ray cluster by `ray start` as users run it.

The tests make the network themselves and remove it at the end, also when a test fails:

    tb-ID-sw   bridge br0 ─┬─ v0 ══ eth0  tb-ID-h0  10.213.0.10/24  head: `ray start --head --port 6379`, drivers
                           ├─ v1 ══ eth0  tb-ID-h1  10.213.0.11/24  worker: `ray start --address 10.213.0.10:6379`
                           └─ v2 ══ eth0  tb-ID-h2  10.213.0.12/24  worker (lost in the last test)

Each ``══`` is a veth pair; ``ID`` is new for every session, and the 10.213.0.0/24 addresses exist only
inside these namespaces. Every host has its loopback up, one CPU and its own Ray temp dir; the hosts
share this machine's filesystem, so the run folders are on a path all of them see. Drivers run
`testbed run` inside the head's namespace with ``--set engine.type=ray --set engine.address=HEAD``;
the same scenarios run on the ``local`` engine beside them (in this machine's own namespace) as the
reference. Nothing outlives the module: the last fixture step kills every process left in the
namespaces and checks that no process, namespace or Ray temp dir of theirs remains.

Skipped, with the reason, only where namespaces cannot be made (not root, no ``ip``, ``ip netns``
or veth/bridge links refused).
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.cluster.conftest import command_line, read_json_lines
from tests.decentralized.conftest import TINY as DECENTRALIZED
from tests.federated.test_federated_runs import FEDERATED

SUBNET = "10.213.0"
HEAD_PORT = 6379
ROUNDS = 4
RAY = Path(sys.executable).with_name("ray")


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "CI": "1", "RAY_USAGE_STATS_ENABLED": "0"}


class Hosts:
    """Three hosts (network namespaces) on one bridge, and the Ray cluster `ray start` makes on them."""

    def __init__(self, ray_root: Path):
        tag = secrets.token_hex(3)
        self.switch = f"tb-{tag}-sw"
        self.names = [f"tb-{tag}-h{i}" for i in range(3)]
        self.addresses = [f"{SUBNET}.{10 + i}" for i in range(3)]
        self.head = f"{self.addresses[0]}:{HEAD_PORT}"
        self.ray_root = ray_root
        self.made: list[str] = []
        self.inodes: dict[str, int] = {}

    def _must(self, *args: str) -> None:
        done = _ip(*args)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def make_network(self) -> None:
        """The namespaces, the bridge and the veth pairs; pytest.skip where the kernel refuses them."""
        for name in [self.switch, *self.names]:
            done = _ip("netns", "add", name)
            if done.returncode != 0:
                pytest.skip(f"cannot make network namespaces here: ip netns add {name}: {done.stderr.strip()}")
            self.made.append(name)
            self.inodes[name] = os.stat(f"/run/netns/{name}").st_ino
        try:
            self._must("-n", self.switch, "link", "add", "br0", "type", "bridge")
            for i, host in enumerate(self.names):
                self._must("-n", self.switch, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                           "netns", host)
        except RuntimeError as err:
            pytest.skip(f"cannot link network namespaces here: {err}")
        for name in [self.switch, *self.names]:
            self._must("-n", name, "link", "set", "lo", "up")
        self._must("-n", self.switch, "link", "set", "br0", "up")
        for i, (host, address) in enumerate(zip(self.names, self.addresses)):
            self._must("-n", self.switch, "link", "set", f"v{i}", "master", "br0")
            self._must("-n", self.switch, "link", "set", f"v{i}", "up")
            self._must("-n", host, "addr", "add", f"{address}/24", "dev", "eth0")
            self._must("-n", host, "link", "set", "eth0", "up")

    def command(self, host: int, *command: object) -> list[str]:
        return ["ip", "netns", "exec", self.names[host], *map(str, command)]

    def ray_start(self, host: int) -> subprocess.Popen:
        """`ray start` on one host, as a user types it (it returns once the node has joined)."""
        role = (["--head", "--port", HEAD_PORT, "--include-dashboard=false"] if host == 0
                else ["--address", self.head])
        with (self.ray_root / f"ray-start-h{host}.log").open("w") as log:
            return subprocess.Popen(
                self.command(host, RAY, "start", *role, "--node-ip-address", self.addresses[host], "--num-cpus", 1,
                             "--object-store-memory", 100_000_000, "--disable-usage-stats",
                             "--temp-dir", self.ray_root / f"h{host}"),
                stdout=log, stderr=subprocess.STDOUT, env=_environment())

    def start_cluster(self) -> None:
        self._wait_started([self.ray_start(0)])
        self._wait_started([self.ray_start(1), self.ray_start(2)])

    def _wait_started(self, starts: list[subprocess.Popen]) -> None:
        for start in starts:
            code = start.wait(timeout=180)
            if code != 0:
                logs = "\n".join(p.read_text()[-2000:] for p in sorted(self.ray_root.glob("ray-start-*.log")))
                raise RuntimeError(f"ray start exited with {code}:\n{logs}")

    def pids(self, host: str) -> list[int]:
        done = _ip("netns", "pids", host)
        return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []

    def kill(self, host: str, timeout_s: float = 20.0) -> list[int]:
        """SIGKILL every process in one namespace (a host losing power), until none is left."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids(host)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return killed

    def leftovers(self) -> list[str]:
        """Processes of these hosts still running anywhere: in their namespaces, or naming their temp dirs."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                inode = os.stat(f"/proc/{process.pid}/ns/net").st_ino
            except (psutil.Error, OSError):
                continue
            line = command_line(process)
            if inode in self.inodes.values() or str(self.ray_root) in line:
                found.append(f"{process.pid}: {line[:200]}")
        return found

    def remove(self) -> None:
        """Kill everything on the hosts and delete the namespaces; raise if anything is left."""
        for name in reversed(self.made):
            self.kill(name)
        for name in reversed(self.made):
            _ip("netns", "del", name)
        left = self.leftovers()
        for line in left:  # never leave them running, even when reporting them
            pid = int(line.split(":", 1)[0])
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        listed = _ip("netns", "list").stdout
        still_listed = [name for name in self.made if name in listed.split()]
        assert not left and not still_listed, f"left behind: processes {left}, namespaces {still_listed}"


def _require_namespaces() -> None:
    """pytest.skip unless this process can make network namespaces (the rest is checked as it is made)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) to make network namespaces")


@pytest.fixture(scope="module")
def hosts():
    _require_namespaces()
    # Ray's session folders hold Unix sockets: keep their paths short.
    ray_root = Path(tempfile.mkdtemp(prefix="tb-ray-", dir="/tmp"))
    cluster = Hosts(ray_root)
    try:
        cluster.make_network()
        cluster.start_cluster()
        yield cluster
    finally:
        try:
            cluster.remove()
        finally:
            shutil.rmtree(ray_root, ignore_errors=True)


# --- the scenarios, on local and on the hosts -------------------------------------------------------


def _testbed(*args: object, host: Hosts | None = None) -> subprocess.Popen:
    """``testbed ARGS`` in its own process: in this machine's namespace, or on the head host."""
    command = [sys.executable, "-m", "testbed.cli", *map(str, args), "--quiet"]
    return subprocess.Popen(host.command(0, *command) if host else command, env=_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout_s: float = 420) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=timeout_s)
    finally:
        process.kill()
        process.wait()
    return process.returncode, err


def _on_hosts(hosts: Hosts) -> list[str]:
    return ["--set", "engine.type=ray", "--set", f"engine.address={hosts.head}"]


def _without_timings(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in read_json_lines(run_dir / "metrics.jsonl")]


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


class LocalReferences:
    """The scenarios on the ``local`` engine, each started once and early so that it overlaps the hosts' work."""

    def __init__(self, folder: Path):
        self.folder = folder
        federated = copy.deepcopy(FEDERATED)
        federated["federated"]["rounds"] = ROUNDS
        # On Ray with three CPUs, as the hosts have: the decentralized nodes are then hosted by three
        # actors on both engines. (In-process, or over two actors, gossip sums its float32 rows in
        # other blocks: the same numbers only to rounding, ~1e-7.)
        decentralized = {**DECENTRALIZED, "engine": {"type": "local", "num_cpus": 3, "use_ray": "always"}}
        self.scenarios = {"federated": federated, "decentralized": decentralized}
        self.runs: dict[str, subprocess.Popen] = {}
        self.done: dict[str, Path] = {}

    def scenario(self, name: str) -> Path:
        path = self.folder / f"{name}.yaml"
        if not path.exists():
            path.write_text(yaml.safe_dump(self.scenarios[name]))
        return path

    def start(self, name: str) -> None:
        if name not in self.runs:
            self.runs[name] = _testbed("run", self.scenario(name), "--run-dir", self.folder / f"{name}-local")

    def run_dir(self, name: str) -> Path:
        """The finished local run's folder."""
        if name not in self.done:
            self.start(name)
            code, err = _finish(self.runs[name])
            assert code == 0, err
            self.done[name] = self.folder / f"{name}-local"
        return self.done[name]

    def stop(self) -> None:
        for run in self.runs.values():
            run.kill()
            run.wait()


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Requested before `hosts`, so the local runs start while the hosts start Ray."""
    _require_namespaces()
    local = LocalReferences(tmp_path_factory.mktemp("netns-runs"))
    local.start("federated")
    local.start("decentralized")
    try:
        yield local
    finally:
        local.stop()


def test_federated_across_three_hosts_matches_local(references, hosts):
    run_dir = references.folder / "federated-hosts"

    code, err = _finish(_testbed("run", references.scenario("federated"), "--run-dir", run_dir, *_on_hosts(hosts),
                                 host=hosts))

    assert code == 0, err
    local = references.run_dir("federated")
    assert _summary(run_dir)["engine"] == {"type": "ray", "nodes": 3, "cpus": 3.0}
    assert _without_timings(run_dir) == _without_timings(local)
    assert _summary(run_dir)["final_metrics"] == _summary(local)["final_metrics"]


def test_decentralized_across_three_hosts_matches_local(references, hosts):
    run_dir = references.folder / "decentralized-hosts"

    code, err = _finish(_testbed("run", references.scenario("decentralized"), "--run-dir", run_dir,
                                 *_on_hosts(hosts), host=hosts))

    assert code == 0, err
    local = references.run_dir("decentralized")
    assert _summary(run_dir)["engine"] == {"type": "ray", "nodes": 3, "cpus": 3.0}
    assert _summary(run_dir)["final_metrics"] == _summary(local)["final_metrics"]


# --- losing a host (last: the cluster keeps two hosts afterwards) -----------------------------------


def test_a_worker_host_lost_mid_federated_run_stops_and_resumes_to_the_local_numbers(references, hosts):
    """A host lost mid-run costs its client a round: the run stops with one line and exit code 3,
    keeping its checkpoints (it does not aggregate the clients that answered, which would end with
    numbers no other engine gives). Once Ray has marked the host dead, `testbed resume` redoes the
    round on the two remaining hosts and ends with the local numbers."""
    run_dir = references.folder / "federated-host-lost"
    run = _testbed("run", references.scenario("federated"), "--run-dir", run_dir, *_on_hosts(hosts), host=hosts)
    metrics = run_dir / "metrics.jsonl"
    while run.poll() is None and not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        time.sleep(0.02)
    rounds_before = metrics.read_text().count("\n") if metrics.exists() else 0
    killed = hosts.kill(hosts.names[2])

    code, err = _finish(run)

    assert killed and hosts.pids(hosts.names[2]) == []
    assert 1 <= rounds_before < ROUNDS, "the host was not lost mid-run"
    last = err.strip().splitlines()[-1]
    assert code == 3 and "Traceback" not in err, err
    assert last.startswith("error: ") and "clients failed" in last and "testbed resume" in last, err
    _wait_until_marked_dead(hosts, hosts.addresses[2])

    code, err = _finish(_testbed("resume", run_dir, host=hosts))

    assert code == 0, err
    local = references.run_dir("federated")
    assert _without_timings(run_dir) == _without_timings(local)
    assert _summary(run_dir)["final_metrics"] == _summary(local)["final_metrics"]


def _wait_until_marked_dead(hosts: Hosts, address: str, timeout_s: float = 90.0) -> None:
    """Ray's health checks mark a lost node dead after some seconds; a run started before that may
    still place work on it."""
    probe = (f"import time, ray\nray.init(address='{hosts.head}', logging_level='ERROR')\n"
             f"deadline = time.time() + {timeout_s}\n"
             f"while any(n['Alive'] and n['NodeManagerAddress'] == '{address}' for n in ray.nodes()):\n"
             "    assert time.time() < deadline, 'the lost node is still alive for Ray'\n"
             "    time.sleep(1)\n")
    done = subprocess.run(hosts.command(0, sys.executable, "-c", probe), env=_environment(), capture_output=True,
                          text=True, timeout=timeout_s + 60)
    assert done.returncode == 0, done.stderr
