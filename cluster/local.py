"""An emulated Ray cluster on this machine, for trying cluster scenarios without machines.

    testbed cluster up --nodes 3 --cpus-per-node 1
    testbed run scenarios/quickstart.yaml --set 'engine={type: ray}'   # address 'auto' finds it
    testbed cluster status
    testbed cluster down

`up` starts a keeper process (``python -m testbed.cluster.local``) that holds a `ray.cluster_utils.Cluster`,
Ray's own way of emulating nodes on one machine: a head and ``nodes - 1`` worker nodes, each with
its own raylet, object store and CPU count, so Ray places tasks and actors across them as it would
across machines. The keeper lives in its own session; `down` stops it, and with it every process of
the cluster (they share its process group, and Ray's reaper kills them if the keeper dies).

No dashboard and no Ray client server (``ray://``) are started: drivers join through the GCS
address. (The GCS, the raylets and their agents listen on the machine's address, as in any Ray
cluster: Ray has no switch to bind them to loopback.) The state
(keeper pid, address, nodes) is kept in ``cluster.json`` under ``$TESTBED_CLUSTER_DIR`` (default
``/tmp/testbed-cluster-<uid>``), beside the keeper's log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from testbed.errors import UserError

STATE_DIR_ENV = "TESTBED_CLUSTER_DIR"
DEFAULT_OBJECT_STORE_MB = 256
START_TIMEOUT_S = 180.0


def state_dir() -> Path:
    """Where the running cluster's state file and the keeper's log live."""
    return Path(os.environ.get(STATE_DIR_ENV) or f"/tmp/testbed-cluster-{os.getuid()}")


def _state_path() -> Path:
    return state_dir() / "cluster.json"


def read_state() -> dict[str, Any] | None:
    """The running cluster's state, or None; a state whose keeper has died is removed."""
    path = _state_path()
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if not _is_keeper(state["keeper_pid"]):
        path.unlink(missing_ok=True)
        return None
    return state


def _is_keeper(pid: int) -> bool:
    """Whether ``pid`` is still a running keeper (not a zombie, not another process reusing the pid)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and "testbed.cluster.local" in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


# ---------------------------------------------------------------------------------------------
# up / down / status


def up(nodes: int, cpus_per_node: int, head_cpus: int | None = None, object_store_mb: int = DEFAULT_OBJECT_STORE_MB,
       timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Start a head and ``nodes - 1`` workers with ``cpus_per_node`` CPUs each; return the state.

    ``head_cpus`` (default: ``cpus_per_node``) of 0 makes a head that only hosts drivers, as large
    clusters have: all work then lands on worker nodes.
    """
    head_cpus = cpus_per_node if head_cpus is None else head_cpus
    if nodes < 1 or min(cpus_per_node, head_cpus) < 0 or object_store_mb < 75:
        raise UserError("cluster up: --nodes must be >= 1, CPUs per node >= 0 and --object-store-mb >= 75")
    running = read_state()
    if running is not None:
        raise UserError(f"cluster up: a testbed cluster is already up at {running['address']}; "
                        "'testbed cluster down' stops it")
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "testbed.cluster.local", "--nodes", str(nodes),
               "--cpus-per-node", str(cpus_per_node), "--head-cpus", str(head_cpus),
               "--object-store-mb", str(object_store_mb), "--state-dir", str(folder)]
    with open(folder / "keeper.log", "wb") as log:
        keeper = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, cwd=Path(__file__).resolve().parent.parent)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_state()
        if state is not None and state["keeper_pid"] == keeper.pid:
            return state
        if keeper.poll() is not None:
            raise UserError(f"cluster up: the cluster failed to start: {_last_line(folder / 'keeper.log')}")
        time.sleep(0.2)
    _stop_keeper(keeper.pid)
    raise UserError(f"cluster up: nodes did not join within {timeout_s:.0f}s; see {folder / 'keeper.log'}")


def down(timeout_s: float = 60.0) -> dict[str, Any] | None:
    """Stop the running cluster (every process of it); returns its state, or None if none was up."""
    state = read_state()
    if state is None:
        return None
    _stop_keeper(state["keeper_pid"], timeout_s)
    _state_path().unlink(missing_ok=True)
    return state


def _stop_keeper(pid: int, timeout_s: float = 60.0) -> None:
    """SIGTERM the keeper (it shuts the nodes down), then SIGKILL its process group if it lingers.

    Returns only when the keeper and every process it had started are gone: a Ray worker can still
    be exiting when the keeper has, and one that left the group would outlive a plain `killpg`. The
    keeper itself is waited for too: while it exits, its command line reads empty (so `_is_keeper`
    is already false) though it still runs for a moment.
    """
    processes = _process_and_descendants(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _is_keeper(pid):
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)  # the keeper leads its own session: the group is the cluster
    except (ProcessLookupError, PermissionError):
        pass
    _reap(pid)
    _kill_survivors(processes)


def _process_and_descendants(pid: int) -> list[Any]:
    import psutil

    try:
        process = psutil.Process(pid)
        return [process, *process.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _kill_survivors(processes: list[Any], grace_s: float = 10.0) -> None:
    """Wait ``grace_s`` for ``processes`` to exit, then SIGKILL (and wait for) any still running."""
    import psutil

    alive = _wait_exited(processes, grace_s)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.kill()
    _wait_exited(alive, grace_s)


def _wait_exited(processes: list[Any], timeout_s: float) -> list[Any]:
    """Poll until every process has exited; return those still running at the deadline.

    A zombie has exited (a container's init may reap it late): `psutil.wait_procs` would count one
    that is not our child as running until its timeout.
    """
    deadline = time.monotonic() + timeout_s
    alive = [p for p in processes if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _running(p)]
    return alive


def _running(process: Any) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def status() -> dict[str, Any]:
    """Nodes, their resources and the drivers (runs) connected to the running cluster."""
    state = read_state()
    if state is None:
        return {"running": False}
    nodes, jobs = _query_gcs(state["address"])
    return {"running": True, "address": state["address"], "keeper_pid": state["keeper_pid"],
            "started": state["started"], "nodes": nodes, "runs": jobs}


def _query_gcs(address: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node_table, job_table = gcs_tables(address)
    nodes = [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "head": _is_head(n),
              "alive": bool(n["Alive"]), "resources": _plain_resources(n["Resources"])}
             for n in node_table]
    runs = [{"job_id": j["JobID"], "pid": j["DriverPid"], "command": j["Entrypoint"],
             "run_dir": run_dir_of(j["Entrypoint"]), "started": j["StartTime"] / 1000.0}
            for j in job_table if not j["IsDead"]]
    return nodes, runs


def gcs_tables(address: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The node table (as `ray.nodes()` gives it) and the job table, read straight from the GCS.

    This is how `ray.cluster_utils` reads them; it needs no driver, so asking neither registers a
    job nor starts a worker on the cluster.
    """
    from ray._private.state import GlobalState
    from ray._raylet import GcsClientOptions  # type: ignore[attr-defined]  # missing from ray's _raylet.pyi

    state = GlobalState()
    state._initialize_global_state(GcsClientOptions.create(address, None, allow_cluster_id_nil=True,
                                                           fetch_cluster_id_if_nil=False))
    try:
        return state.node_table(), state.job_table()
    finally:
        state.disconnect()


def _is_head(node: dict[str, Any]) -> bool:
    return "node:__internal_head__" in node.get("Resources", {})


def _plain_resources(resources: dict[str, float]) -> dict[str, float]:
    """CPU, GPU, memory and custom resources, without Ray's per-node bookkeeping entries."""
    return {k: v for k, v in sorted(resources.items()) if not k.startswith("node:")}


def run_dir_of(command: str) -> str | None:
    """The run folder a ``testbed run --run-dir DIR`` or ``testbed resume DIR`` command line writes."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for flag in ("--run-dir", "resume"):
        if flag in words[:-1]:
            return words[words.index(flag) + 1]
    return next((w.removeprefix("--run-dir=") for w in words if w.startswith("--run-dir=")), None)


def format_status(info: dict[str, Any]) -> str:
    """The status as a person reads it."""
    if not info["running"]:
        return "no testbed cluster is up ('testbed cluster up --nodes N' starts one)"
    lines = [f"cluster at {info['address']} (keeper pid {info['keeper_pid']}, up since {info['started']})",
             f"nodes ({sum(n['alive'] for n in info['nodes'])} alive):"]
    for node in info["nodes"]:
        role = "head" if node["head"] else "worker"
        state = "alive" if node["alive"] else "dead"
        resources = ", ".join(f"{k}={_human(k, v)}" for k, v in node["resources"].items())
        lines.append(f"  {node['node_id'][:12]}  {role:6s} {state:5s}  {resources}")
    lines.append(f"runs ({len(info['runs'])}):" if info["runs"] else "runs: none")
    for run in info["runs"]:
        where = run["run_dir"] or "-"
        lines.append(f"  pid {run['pid']}  run dir {where}  {run['command']}")
    return "\n".join(lines)


def run_command(action: str, nodes: int, cpus_per_node: int, head_cpus: int | None = None) -> int:
    """``testbed cluster up|down|status``: do it and print what happened."""
    if action == "up":
        state = up(nodes, cpus_per_node, head_cpus)
        print(f"cluster up at {state['address']}: {nodes} nodes x {cpus_per_node} CPUs\n"
              "run scenarios on it with engine: {type: ray} (address 'auto' finds it), e.g. "
              f"--set 'engine={{type: ray, address: {state['address']}}}'")
    elif action == "down":
        stopped = down()
        print(f"cluster at {stopped['address']} is down" if stopped else "no testbed cluster was up")
    else:
        print(format_status(status()))
    return 0


def _human(key: str, value: float) -> str:
    if "memory" in key:
        return f"{value / 2**20:.0f}MiB"
    return f"{value:g}"


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    return lines[-1].strip() if lines else f"no output (see {log})"


# ---------------------------------------------------------------------------------------------
# the keeper process


def _node_args(cpus: int, object_store_mb: int) -> dict[str, Any]:
    return {"num_cpus": cpus, "num_gpus": 0, "object_store_memory": object_store_mb * 2**20,
            "include_dashboard": False, "dashboard_host": "127.0.0.1"}


def serve(nodes: int, cpus_per_node: int, head_cpus: int, object_store_mb: int, folder: Path) -> None:
    """Hold the cluster until SIGTERM or SIGINT, then shut every node down."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args=_node_args(head_cpus, object_store_mb))
    stop = threading.Event()
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**_node_args(cpus_per_node, object_store_mb))
        cluster.wait_for_nodes(timeout=START_TIMEOUT_S)
        # Installed after the nodes: each ray Node sets its own SIGTERM handler when created.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        state = {"address": cluster.address, "keeper_pid": os.getpid(), "nodes": nodes,
                 "cpus_per_node": cpus_per_node, "head_cpus": head_cpus, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        tmp = folder / ".cluster.json.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, folder / "cluster.json")
        print(f"cluster up at {cluster.address} with {nodes} nodes", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        (folder / "cluster.json").unlink(missing_ok=True)
        cluster.shutdown()
        print("cluster down", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="keeper of an emulated local Ray cluster (use 'testbed cluster')")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--cpus-per-node", type=int, required=True)
    parser.add_argument("--head-cpus", type=int, required=True)
    parser.add_argument("--object-store-mb", type=int, default=DEFAULT_OBJECT_STORE_MB)
    parser.add_argument("--state-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.nodes, args.cpus_per_node, args.head_cpus, args.object_store_mb, args.state_dir)


if __name__ == "__main__":
    main()
