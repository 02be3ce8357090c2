"""Multi-node runs on emulated clusters: the local engine's numbers, through node loss and write errors.

The federated scenario is the tiny one of tests/federated; the workload scenario is the tiny
classifier of tests/conftest.py, long enough (four checkpointed chunks) for a node to die mid-chunk.
All multi-node tests share the session's emulated cluster (see conftest.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
import yaml

from testbed.cluster import hostfiles, local
from testbed.federated.config import SamplingConfig
from testbed.federated.sampling import sample_clients
from testbed.seeding import SeedTree
from tests.cluster.conftest import command_line, process_tree, read_json_lines, still_running
from tests.decentralized.conftest import TINY as DECENTRALIZED
from tests.decentralized.test_dec_engines import _assert_same_run
from tests.federated.test_federated_runs import FEDERATED
from tests.pretrain.test_pretrain_run import DETERMINISTIC, TINY_PRETRAIN

LONGER = {"training": {"steps": 80, "eval_every": 10, "checkpoint_every": 20}}


def _testbed(*args: object) -> subprocess.Popen:
    """Start ``testbed ARGS`` in its own process (Flower and Ray keep state per process)."""
    return subprocess.Popen([sys.executable, "-m", "testbed.cli", *map(str, args)], env={**os.environ, "CI": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout_s: float = 600) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=timeout_s)
    finally:
        process.kill()
        process.wait()
    return process.returncode, err


def _without_timings(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in read_json_lines(run_dir / "metrics.jsonl")]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _run_here_and_on_cluster(path: Path, tmp_path: Path, address: str) -> None:
    """Run the scenario at ``path`` on the local engine and on the cluster side by side (most of a
    tiny run is start-up, which two processes overlap), into ``tmp_path``/local and /cluster."""
    local_run = _testbed("run", path, "--run-dir", tmp_path / "local", "--quiet")
    cluster_run = _testbed("run", path, "--run-dir", tmp_path / "cluster", "--quiet",
                           "--set", f"engine={{type: ray, address: '{address}'}}")
    for code, err in (_finish(local_run), _finish(cluster_run)):
        assert code == 0, err


# --- the ray engine on three nodes ---------------------------------------------------------------


def test_federated_on_three_nodes_matches_local_and_status_lists_it(tmp_path, emulated_cluster):
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({**FEDERATED, "federated": {**FEDERATED["federated"], "rounds": 2}}))
    # Side by side: most of a tiny federated run is start-up, which two processes overlap.
    local_run = _testbed("run", path, "--run-dir", tmp_path / "local", "--quiet")
    cluster_run = _testbed("run", path, "--run-dir", tmp_path / "cluster", "--quiet",
                           "--set", f"engine={{type: ray, address: '{emulated_cluster['address']}'}}")
    try:
        listed = _wait_for_run_in_status(tmp_path / "cluster", cluster_run)
    finally:
        finished = (_finish(local_run), _finish(cluster_run))

    for code, err in finished:
        assert code == 0, err
    assert listed["pid"] == cluster_run.pid
    assert _summary(tmp_path / "cluster")["engine"]["nodes"] == 3
    assert _without_timings(tmp_path / "cluster") == _without_timings(tmp_path / "local")
    assert _summary(tmp_path / "cluster")["final_metrics"] == _summary(tmp_path / "local")["final_metrics"]


def test_federated_sampling_picks_the_same_clients_on_three_nodes_as_locally(tmp_path, emulated_cluster):
    """Client sampling draws partition ids from the root seed, never Flower's per-run node ids."""
    path = tmp_path / "fed.yaml"
    path.write_text(yaml.safe_dump({**FEDERATED, "federated": {**FEDERATED["federated"], "rounds": 2,
                                                               "sampling": {"count": 2}}}))
    _run_here_and_on_cluster(path, tmp_path, emulated_cluster["address"])

    assert _summary(tmp_path / "cluster")["engine"]["nodes"] == 3
    samples = [[r["clients_sampled"] for r in _without_timings(tmp_path / name)] for name in ("local", "cluster")]
    expected = [sample_clients(SamplingConfig(count=2), 4, SeedTree(FEDERATED["seed"]), r) for r in (1, 2)]
    assert samples[0] == samples[1] == expected
    assert [r["clients_trained"] for r in _without_timings(tmp_path / "cluster")] == [2, 2]
    assert _without_timings(tmp_path / "cluster") == _without_timings(tmp_path / "local")


def test_decentralized_on_three_nodes_matches_local(tmp_path, emulated_cluster):
    path = tmp_path / "dec.yaml"
    path.write_text(yaml.safe_dump({**DECENTRALIZED, "engine": {"type": "local"}}))
    _run_here_and_on_cluster(path, tmp_path, emulated_cluster["address"])

    assert _summary(tmp_path / "cluster")["engine"]["nodes"] == 3
    _assert_same_run(tmp_path / "cluster", tmp_path / "local")


def test_pretraining_through_ray_train_on_three_nodes_matches_one_process(tmp_path, emulated_cluster):
    """Ray Train's TorchTrainer runs the DeepSpeed loop with two workers placed on the cluster."""
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump({**TINY_PRETRAIN, "pretrain": {**TINY_PRETRAIN["pretrain"], "ray_workers": 2}}))
    _run_here_and_on_cluster(path, tmp_path, emulated_cluster["address"])

    assert _summary(tmp_path / "cluster")["engine"]["nodes"] == 3
    ours, reference = (read_json_lines(tmp_path / name / "metrics.jsonl") for name in ("cluster", "local"))
    assert [r["step"] for r in ours] == [r["step"] for r in reference]
    # Two workers and one process give the same numbers up to float summation order.
    for mine, theirs in zip(ours, reference):
        for key in DETERMINISTIC:
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key


def _wait_for_run_in_status(run_dir: Path, run: subprocess.Popen) -> dict:
    """The entry `testbed cluster status` shows for the run writing ``run_dir``, polled while it runs."""
    while run.poll() is None:
        found = [r for r in local.status()["runs"] if r["run_dir"] == str(run_dir)]
        if found:
            return found[0]
        time.sleep(0.5)
    assert run.stderr is not None  # _testbed pipes it
    pytest.fail(f"the run ended before 'testbed cluster status' listed it: {run.stderr.read()}")


# --- write errors ---------------------------------------------------------------------------------


def _fail_writes_after_first_checkpoint(monkeypatch, run_dir: Path, code: int, only_checkpoints: bool) -> None:
    """Make fsync fail as a full or read-only disk would, once the first checkpoint is on disk."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        written = list((run_dir / "checkpoints").glob("ckpt-*.pt"))
        if written and str(run_dir) in target and (".ckpt." in target or not only_checkpoints):
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to tell which file is written")
@pytest.mark.parametrize(("code", "only_checkpoints", "refused"), [
    (errno.ENOSPC, False, "cannot write metrics.jsonl: No space left on device (ENOSPC)"),
    (errno.EROFS, True, "cannot write checkpoints/ckpt-000000020.pt: Read-only file system (EROFS)"),
], ids=["disk-full-on-metrics", "read-only-on-checkpoint"])
def test_refused_write_mid_run_is_one_clear_line_and_resume_matches(cli, write_scenario, tmp_path, monkeypatch,
                                                                     code, only_checkpoints, refused):
    path = write_scenario()
    assert cli("run", path, "--run-dir", tmp_path / "reference", "--quiet")[0] == 0
    run_dir = tmp_path / "run"
    _fail_writes_after_first_checkpoint(monkeypatch, run_dir, code, only_checkpoints)

    status, out, err = cli("run", path, "--run-dir", run_dir, "--quiet")

    monkeypatch.undo()
    assert status == 2
    assert err.count("\n") == 1 and refused in err and "checkpoints/ckpt-000000010.pt, is intact" in err
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["ckpt-000000010.pt"]  # no temp file left
    assert torch.load(run_dir / "checkpoints" / "ckpt-000000010.pt", weights_only=True)["step"] == 10
    assert cli("resume", run_dir, "--quiet")[0] == 0
    assert read_json_lines(run_dir / "metrics.jsonl") == read_json_lines(tmp_path / "reference" / "metrics.jsonl")


def test_run_folder_under_a_file_is_a_clear_error(cli, write_scenario, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")

    code, _, err = cli("run", write_scenario(), "--run-dir", blocker / "run", "--quiet")

    assert code == 2
    assert err == f"error: {blocker / 'run'}: cannot write the run folder: Not a directory (ENOTDIR); " \
                  "no checkpoint had been written yet\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_run_folder_in_a_read_only_folder_is_a_clear_error(cli, write_scenario, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        code, _, err = cli("run", write_scenario(), "--run-dir", locked / "run", "--quiet")
    finally:
        locked.chmod(0o755)
    assert code == 2 and "cannot write the run folder: Permission denied (EACCES)" in err
    assert not (locked / "run").exists()


# --- `testbed cluster` ----------------------------------------------------------------------------


def test_status_lists_the_nodes_and_their_resources(cli, emulated_cluster):
    info = local.status()

    cpus = {("head" if n["head"] else "worker", n["resources"].get("CPU", 0.0)) for n in info["nodes"] if n["alive"]}
    assert len(info["nodes"]) == 3 and cpus == {("head", 0.0), ("worker", 1.0)} and info["runs"] == []
    code, out, _ = cli("cluster", "status")
    assert code == 0 and out.count(" alive ") == 3 and out.count("CPU=1") == 2 and "runs: none" in out
    assert out.startswith(f"cluster at {emulated_cluster['address']} (keeper pid {emulated_cluster['keeper_pid']}")


def test_hostfiles_from_the_live_cluster_and_from_a_file(tmp_path, emulated_cluster):
    from_ray = hostfiles.hosts_from_ray(emulated_cluster["address"])
    # The emulated nodes are all this machine: one host for a launcher, with the nodes' CPUs as slots.
    assert len(from_ray) == 1 and from_ray[0].slots == 2
    listed = tmp_path / "nodes.txt"
    listed.write_text("# from scontrol show hostnames\nnode01\nnode02 slots=4\nnode03:2\n")
    hosts = hostfiles.hosts_from_file(listed)
    assert hostfiles.deepspeed_hostfile(hosts) == "node01 slots=1\nnode02 slots=4\nnode03 slots=2\n"
    assert hostfiles.mpi_hostfile(hosts) == "node01:1\nnode02:4\nnode03:2\n"
    assert hostfiles.mpi_hosts(hostfiles.hosts_from_file(listed, slots=8)) == ["node01:8", "node02:8", "node03:8"]


def test_cluster_cli_up_refuses_a_second_cluster_and_down_stops_every_process(cli, tmp_path, monkeypatch):
    monkeypatch.setenv(local.STATE_DIR_ENV, str(tmp_path / "state"))
    try:
        code, out, err = cli("cluster", "up", "--nodes", "1", "--cpus-per-node", "1")
        assert code == 0, err
        keeper = local.read_state()["keeper_pid"]
        processes = process_tree(keeper)
        assert any("/raylet/raylet " in command_line(p) for p in processes)

        assert cli("cluster", "up")[2].startswith("error: cluster up: a testbed cluster is already up at ")
        code, out, _ = cli("cluster", "down")
    finally:
        local.down()

    assert code == 0 and out.startswith("cluster at ") and out.rstrip().endswith("is down")
    assert not [p for p in processes if still_running(p)]
    assert cli("cluster", "status")[1].startswith("no testbed cluster is up")


@pytest.mark.parametrize("recipe", ["ray-onprem.yaml", "ray-aws.yaml"])
def test_ray_up_recipes_pass_rays_own_config_checks(recipe):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(yaml.safe_load((Path(local.__file__).parent / recipe).read_text()))

    validate_config(config)  # raises on a key or value `ray up` would reject
    assert any("pip install -q -e ~/testbed" in c for c in config["worker_setup_commands"])
    assert config["file_mounts"] == {"~/testbed": "."}


def test_slurm_template_is_valid_bash():
    template = Path(local.__file__).parent / "slurm" / "testbed.sbatch"
    done = subprocess.run(["bash", "-n", str(template)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_run_dir_of_reads_run_and_resume_command_lines():
    assert local.run_dir_of("/v/bin/python -m testbed.cli run s.yaml --run-dir /r/a --quiet") == "/r/a"
    assert local.run_dir_of("testbed run s.yaml --run-dir=/r/b") == "/r/b"
    assert local.run_dir_of("/v/bin/testbed resume /r/c --quiet") == "/r/c"
    assert local.run_dir_of("python train.py") is None


# --- losing a worker node (last: the cluster keeps one worker afterwards) --------------------------


def test_worker_node_killed_mid_run_still_gives_the_local_numbers(cli, write_scenario, tmp_path, emulated_cluster):
    path = write_scenario(LONGER)
    code, _, err = cli("run", path, "--run-dir", tmp_path / "local", "--quiet")
    assert code == 0, err
    run_dir = tmp_path / "cluster"
    killer = NodeKiller(emulated_cluster["keeper_pid"], run_dir / "checkpoints")
    killer.start()

    code, _, err = cli("run", path, "--run-dir", run_dir, "--quiet",
                       "--set", f"engine={{type: ray, address: '{emulated_cluster['address']}'}}")

    killer.join(timeout=60)
    assert code == 0, err
    assert killer.killed_while_running, "no node was killed while it ran a training chunk"
    assert sum(n["alive"] for n in local.status()["nodes"]) == 2
    assert read_json_lines(run_dir / "metrics.jsonl") == read_json_lines(tmp_path / "local" / "metrics.jsonl")
    assert _summary(run_dir)["final_metrics"] == _summary(tmp_path / "local")["final_metrics"]


class NodeKiller(threading.Thread):
    """Once a checkpoint exists, kills every process of the worker node that runs a training chunk.

    SIGTERM, as a preempted machine or `ray stop` takes a node down: its raylet tells the GCS at once.
    (SIGKILL gives the same numbers; Ray then notices the node's death by missed heartbeats, ~15 s
    later, which would only make the test slower.)
    """

    def __init__(self, keeper_pid: int, checkpoint_dir: Path, timeout_s: float = 300.0):
        super().__init__(daemon=True)
        self.keeper_pid, self.checkpoint_dir, self.timeout_s = keeper_pid, checkpoint_dir, timeout_s
        self.killed_while_running = False

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and not list(self.checkpoint_dir.glob("ckpt-*.pt")):
            time.sleep(0.05)
        while time.monotonic() < deadline and not self.killed_while_running:
            node = self._node_running_a_chunk()
            if node:
                for process in node:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        process.terminate()
                self.killed_while_running = True
            time.sleep(0.02)

    def _node_running_a_chunk(self) -> list[psutil.Process]:
        """The raylet and descendants of the worker node whose worker process runs ``train_chunk``."""
        for raylet in process_tree(self.keeper_pid):
            line = command_line(raylet)
            if "/raylet/raylet " not in line or " --head" in line:
                continue
            node = process_tree(raylet.pid)
            if any("train_chunk" in command_line(p) for p in node):
                return node
        return []


def test_sweep_on_the_ray_engine_places_variants_without_starving_them(emulated_cluster, write_scenario, tmp_path):
    """Placement holds no CPU, so variants that ask the full cluster for CPUs still run. They are
    forked from the machine's warm server, in its placement host, which goes with the sweep."""
    from tests.conftest import TINY_SCENARIO

    sweep = {**TINY_SCENARIO, "engine": {"type": "ray", "address": emulated_cluster["address"]},
             "training": {"steps": 8, "eval_every": 4, "checkpoint_every": 4},
             "workload": {"name": "classifier", "arch": "mlp", "hidden": 8},
             "sweep": {"grid": {"seed": [1, 2]}, "parallel": 2}}
    running = _testbed("run", write_scenario(sweep), "--run-dir", tmp_path / "sweep", "--quiet")
    warm: dict[int, psutil.Process] = {}  # the warm server, and the variants forked from it
    while running.poll() is None:
        warm.update({p.pid: p for p in process_tree(emulated_cluster["keeper_pid"])
                     if "testbed.engines.warm_server" in command_line(p)})
        time.sleep(0.1)
    code, err = _finish(running)
    assert code == 0, err
    variants = json.loads((tmp_path / "sweep" / "summary.json").read_text())["variants"]
    assert [v["status"] for v in variants.values()] == ["completed", "completed"]
    assert warm
    deadline = time.monotonic() + 15
    while any(still_running(p) for p in warm.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p.pid for p in warm.values() if still_running(p)], "a warm server outlived the sweep"
