"""A Flower simulation that ends inside `ray_outlives_simulation` kills its actors and leaves Ray to
the engine that started it (`testbed.federated.linkstate`): a run's baselines reuse the running Ray."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray
from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

from testbed.federated.linkstate import ray_outlives_simulation


def _backend(killed: list[str]) -> RayBackend:
    backend = RayBackend.__new__(RayBackend)  # no actors started: only terminate is called
    backend.pool = SimpleNamespace(terminate_all_actors=lambda: killed.append("actors"))  # type: ignore[assignment]
    return backend


def test_inside_the_block_the_actors_die_and_ray_stays(monkeypatch):
    killed: list[str] = []
    monkeypatch.setattr(ray, "shutdown", lambda *args, **kwargs: killed.append("ray"))
    flowers = RayBackend.terminate
    with ray_outlives_simulation():
        _backend(killed).terminate()
    assert killed == ["actors"]
    assert RayBackend.terminate is flowers  # Flower's own, again, once the block ends
    _backend(killed).terminate()
    assert killed == ["actors", "actors", "ray"]


def test_a_flower_whose_terminate_changed_is_refused(monkeypatch):
    monkeypatch.setattr("testbed.federated.linkstate._FLOWER_TERMINATE", lambda self: None)
    with pytest.raises(RuntimeError, match="RayBackend.terminate changed"), ray_outlives_simulation():
        pass
