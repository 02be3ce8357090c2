"""Flower's Ray backend across a run's simulations (`testbed.federated.actor_pool`): a simulation that
ends inside `ray_outlives_simulation` leaves Ray to the engine that started it, and inside
`shared_client_actors` hands its idle client actors to the next simulation that fits them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray
from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

from testbed.federated import actor_pool
from testbed.federated.actor_pool import ray_outlives_simulation, shared_client_actors


class _Pool:
    """Flower's `BasicActorPool` as the backend sees it: its actors, the idle ones, terminate."""

    def __init__(self, name: str, killed: list[str], actors: int = 2, idle: int = 2):
        self.name, self.killed, self.num_actors, self.pool = name, killed, actors, [object()] * idle

    def terminate_all_actors(self) -> None:
        self.killed.append(self.name)


def _backend(pool: object | None = None, cpus: float = 1.0) -> RayBackend:
    backend = RayBackend.__new__(RayBackend)  # no Ray, no actors: only build and terminate are called
    backend.pool, backend.app_fn = pool, None  # type: ignore[assignment]
    backend.client_resources, backend.actor_kwargs = {"num_cpus": cpus, "num_gpus": 0.0}, {}
    return backend


@pytest.fixture
def one_ray(monkeypatch):
    """Flower's own build makes a new pool; Ray's node id is settable (a restarted Ray has a new one)."""
    node = {"id": "node-a"}
    built: list[str] = []
    killed: list[str] = []
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: node["id"]))

    def flowers_build(self, app_fn):
        built.append(app_fn)
        self.pool, self.app_fn = _Pool(f"built-{len(built)}", killed), app_fn
    monkeypatch.setattr(actor_pool, "_FLOWER_BUILD", flowers_build)
    monkeypatch.setattr(RayBackend, "build", RayBackend.build)  # Flower's own again after the test, whatever it did
    monkeypatch.setattr(actor_pool, "_check_flower_backend", lambda: None)  # it would read the stand-in's source
    return node, built, killed


def test_inside_the_block_the_actors_die_and_ray_stays(monkeypatch):
    killed: list[str] = []
    monkeypatch.setattr(ray, "shutdown", lambda *args, **kwargs: killed.append("ray"))
    flowers = RayBackend.terminate
    with ray_outlives_simulation():
        _backend(_Pool("actors", killed)).terminate()
    assert killed == ["actors"]
    assert RayBackend.terminate is flowers  # Flower's own, again, once the block ends
    _backend(_Pool("actors", killed)).terminate()
    assert killed == ["actors", "actors", "ray"]


def test_the_next_simulation_gets_the_idle_actors_of_the_last_on_the_same_ray(one_ray):
    node, built, killed = one_ray
    with shared_client_actors():
        first = _backend()
        with ray_outlives_simulation():
            first.build("app-1")
            first.terminate()  # every actor idle: kept
        second = _backend()
        with ray_outlives_simulation():
            second.build("app-2")
            assert second.pool is first.pool and second.app_fn == "app-2" and built == ["app-1"]
            second.terminate()  # kept again
        node["id"] = "node-b"  # Ray started again: the kept actors died with the old one
        again = _backend()
        again.build("app-3")
        assert again.pool is not first.pool and built == ["app-1", "app-3"]
        assert killed == []  # the old Ray's pool is not touched: its actors died with it
        with ray_outlives_simulation():
            again.terminate()
        other = _backend(cpus=2.0)  # other resources: a pool of its own, once the misfit kept on this Ray is gone
        other.build("app-4")
        assert other.pool is not again.pool and built == ["app-1", "app-3", "app-4"]
        assert killed == ["built-2"]
    assert killed == ["built-2", "built-1"]  # what was still kept dies with the block
    assert RayBackend.build is actor_pool._FLOWER_BUILD  # what the block found (here the stand-in for Flower's)


def test_a_pool_with_busy_actors_is_killed_not_kept(one_ray):
    _, _, killed = one_ray
    with shared_client_actors(), ray_outlives_simulation():
        _backend(_Pool("interrupted", killed, actors=2, idle=1)).terminate()
        assert killed == ["interrupted"]
        _backend(_Pool("idle", killed)).terminate()
        assert killed == ["interrupted"]
    assert killed == ["interrupted", "idle"]


def test_an_inner_block_leaves_the_kept_actors_to_the_outer_one(one_ray):
    _, built, killed = one_ray
    with shared_client_actors():
        with shared_client_actors(), ray_outlives_simulation():  # one run's block, in a shared sweep process
            first = _backend()
            first.build("app-1")
            first.terminate()
        assert killed == []  # kept past the run's block
        with shared_client_actors(), ray_outlives_simulation():  # the next run gets them
            second = _backend()
            second.build("app-2")
            assert second.pool is first.pool and built == ["app-1"]
            second.terminate()
    assert killed == ["built-1"]


def test_a_flower_whose_backend_changed_is_refused(monkeypatch):
    monkeypatch.setattr(actor_pool, "_FLOWER_TERMINATE", lambda self: None)
    with pytest.raises(RuntimeError, match="RayBackend.terminate changed"), ray_outlives_simulation():
        pass
    monkeypatch.undo()
    monkeypatch.setattr(actor_pool, "_FLOWER_BUILD", lambda self, app_fn: None)
    with pytest.raises(RuntimeError, match="RayBackend.build changed"), shared_client_actors():
        pass
