"""Engines: the same scenario gives the same numbers in-process, on local Ray and on a 3-node cluster."""

from __future__ import annotations

import json
import socket

import pytest

from testbed.cluster.addresses import check_ray_address
from testbed.engines.base import InProcessEngine
from testbed.engines.config import LocalEngineConfig, RayEngineConfig
from testbed.engines.registry import make_engine
from testbed.errors import UserError


def _square(x: int) -> int:
    return x * x


def test_inprocess_engine_maps_in_order():
    with InProcessEngine(LocalEngineConfig()) as engine:
        assert engine.map(_square, [(3,), (1,), (2,)]) == [9, 1, 4]
        assert engine.call(_square, 5) == 25


def test_inprocess_engine_runs_parallel_calls_in_threads_in_order():
    with InProcessEngine(LocalEngineConfig()) as engine:
        assert engine.map(_square, [(n,) for n in range(6)], parallel=3) == [0, 1, 4, 9, 16, 25]


def test_local_engine_uses_ray_only_when_there_is_parallel_work_or_a_kind_needs_ray():
    tasks = {"tasks"}
    assert isinstance(make_engine(LocalEngineConfig(), tasks, parallel_tasks=1), InProcessEngine)
    assert make_engine(LocalEngineConfig(), tasks, parallel_tasks=4).name == "local"
    assert make_engine(LocalEngineConfig(), {"ray"}, parallel_tasks=1).name == "local"
    assert make_engine(LocalEngineConfig(use_ray="always"), tasks, parallel_tasks=1).name == "local"
    assert isinstance(make_engine(LocalEngineConfig(use_ray="never"), tasks, parallel_tasks=8), InProcessEngine)


def test_engines_offer_what_their_settings_declare():
    inprocess = make_engine(LocalEngineConfig(), {"tasks"}, parallel_tasks=1)
    assert inprocess.offers("tasks") and inprocess.offers("torch_distributed") and not inprocess.offers("actors")
    assert make_engine(LocalEngineConfig(), {"tasks"}, parallel_tasks=4).offers("actors")
    with pytest.raises(RuntimeError, match="does not offer 'spmd'"):
        inprocess.spmd(_square, 2)


def _node(node_id: str, address: str, cpus: float, alive: bool = True) -> dict:
    return {"NodeID": node_id, "NodeManagerAddress": address, "Resources": {"CPU": cpus} if cpus else {},
            "Alive": alive}


def test_sweep_placement_has_one_host_per_machine_with_slots_by_its_cpus():
    from testbed.engines.ray_engine import machine_slots

    # An emulated cluster: every node on one machine, one host there (on a node with CPUs) takes every slot.
    emulated = [_node("head", "127.0.0.1", 0), _node("w1", "127.0.0.1", 1), _node("w2", "127.0.0.1", 1)]
    assert machine_slots(emulated, 3) == [("w1", 3)]
    two = [_node("a", "10.0.0.1", 4), _node("b", "10.0.0.2", 12), _node("gone", "10.0.0.3", 64, alive=False)]
    assert machine_slots(two, 8) == [("a", 2), ("b", 6)]
    assert machine_slots(two, 1) == [("b", 1)]  # a machine that gets no slot gets no host
    assert machine_slots([_node("a", "10.0.0.1", 0), _node("b", "10.0.0.2", 0)], 2) == [("a", 1), ("b", 1)]


def test_ray_address_check_fails_fast_for_a_silent_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserError, match="no Ray cluster answers"):
        check_ray_address(f"127.0.0.1:{port}", "s.yaml", timeout_s=0.5)


@pytest.fixture(scope="module")
def three_node_cluster():
    """A Ray cluster of a head and two worker nodes emulated on this machine."""
    from ray.cluster_utils import Cluster  # a base dependency: never skipped

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_ray_engine_on_three_nodes_matches_local(cli, write_scenario, tmp_path, three_node_cluster):
    path = write_scenario()
    code, _, err = cli("run", path, "--run-dir", tmp_path / "local", "--quiet")
    assert code == 0, err

    code, _, err = cli("run", path, "--run-dir", tmp_path / "cluster", "--quiet",
                       "--set", "engine.type=ray", "--set", f"engine.address={three_node_cluster.address}")

    assert code == 0, err
    local = json.loads((tmp_path / "local" / "summary.json").read_text())
    remote = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert remote["engine"]["nodes"] == 3
    assert remote["final_metrics"] == local["final_metrics"]
    assert (tmp_path / "cluster" / "metrics.jsonl").read_text() == (tmp_path / "local" / "metrics.jsonl").read_text()


def test_ray_engine_spreads_tasks_over_the_nodes(three_node_cluster):
    import ray

    with make_engine(RayEngineConfig(type="ray", address=three_node_cluster.address), {"tasks"},
                     parallel_tasks=3) as engine:
        nodes = engine.map(_node_of_task, [(0.5,)] * 6)
        assert engine.describe()["nodes"] == 3
    assert len(set(nodes)) >= 2
    assert not ray.is_initialized()


def _node_of_task(sleep_s: float) -> str:
    import time

    import ray

    time.sleep(sleep_s)
    return ray.get_runtime_context().get_node_id()


@pytest.mark.integration
def test_local_engine_starts_its_own_ray_even_beside_a_running_cluster(cli, write_scenario, tmp_path,
                                                                       three_node_cluster):
    code, _, err = cli("run", write_scenario({"engine": {"type": "local", "num_cpus": 1, "use_ray": "always"}}),
                       "--run-dir", tmp_path / "run", "--quiet")
    assert code == 0, err
    engine = json.loads((tmp_path / "run" / "summary.json").read_text())["engine"]
    assert engine == {"type": "local", "nodes": 1, "cpus": 1.0}
