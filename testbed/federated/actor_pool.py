"""Flower's Ray backend kept across the simulations of one run: Ray itself (`ray_outlives_simulation`)
and its client actors (`shared_client_actors`).

Flower's `RayBackend` starts Ray unless it runs, builds a pool of `ClientAppActor`s sized to the
cluster, and, when its simulation ends, kills the actors and shuts Ray down. A run with baselines
runs one simulation per arm, so each arm would start Ray again (4-8 s on two cores, 1.3 s to stop
it) and new actors: each a Ray worker that imports torch, Flower and the testbed, and torch's
compiler stack at its first optimizer step (3-5 CPU s on two cores before its first client trains).

Within `ray_outlives_simulation` a simulation that ends kills its actors but leaves Ray to the
engine that started it (`testbed.engines`), which stops it when the run ends or is interrupted.

Within `shared_client_actors` (a run's own federation and its baselines; the runs of a sweep's
shared process, `testbed.sweep_shared`, which opens the outer block the runs' own blocks then
join) the ending simulation's pool is kept instead, when every actor is idle, and the next
simulation's backend is given it when it asks for actors with the same resources on the same Ray;
a kept pool that does not fit is killed before a new one is built (its idle actors hold the CPUs
the new pool is sized to). They are Flower's own
`ClientAppActor`s, which run whatever ClientApp each message carries: a client's randomness comes
from the seed tree (its partition, its round), its data and set-up from caches keyed by the whole
scenario text (`testbed.federated.client`), so an actor that trained another arm's clients gives the
same numbers as a fresh one. At the block's end the kept actors are killed as Flower kills them.
Everything else of Flower's backend (its pool, its sizing, its message path) is unchanged.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

_FLOWER_BUILD = RayBackend.build
_FLOWER_TERMINATE = RayBackend.terminate
_INSTALL_LOCK = threading.Lock()
# Within `shared_client_actors`: the idle pools of simulations that ended, by `_pool_key`.
_kept: dict[tuple[Any, ...], Any] | None = None


def _pool_key(backend: RayBackend) -> tuple[Any, ...]:
    """What makes a pool fit a backend: the Ray it lives on (a restarted Ray has a new node) and the
    resources and arguments of its actors."""
    import ray

    return (ray.get_runtime_context().get_node_id(), tuple(sorted(backend.client_resources.items())),
            tuple(sorted(backend.actor_kwargs)))


def _build_reusing(self: RayBackend, app_fn: Callable[[], Any]) -> None:
    """`RayBackend.build`, given the kept pool that fits when there is one; the kept pools on the
    same Ray that do not fit are killed first."""
    key = _pool_key(self)
    with _INSTALL_LOCK:
        kept = _kept if _kept is not None else {}
        pool = kept.pop(key, None)
        misfits = [kept.pop(other) for other in list(kept) if other[0] == key[0]] if pool is None else []
    for misfit in misfits:
        misfit.terminate_all_actors()
    if pool is None:
        _FLOWER_BUILD(self, app_fn)
        return
    self.pool, self.app_fn = pool, app_fn


def _terminate_actors_only(self: RayBackend) -> None:
    """`RayBackend.terminate` without its ``ray.shutdown()``; within `shared_client_actors` an idle
    pool is kept for the next simulation instead of killed."""
    pool = self.pool
    if not pool:
        return
    replaced = None
    with _INSTALL_LOCK:
        keep = _kept is not None and 0 < pool.num_actors == len(pool.pool)  # busy actors: an interrupted run
        if keep:
            assert _kept is not None  # checked above
            key = _pool_key(self)
            replaced = _kept.pop(key, None)
            _kept[key] = pool
    if not keep:
        pool.terminate_all_actors()
    elif replaced is not None:  # two simulations at once in one block: the earlier pool goes
        replaced.terminate_all_actors()


def _check_flower_backend() -> None:
    """Fail loudly if Flower's backend no longer builds and ends its pool as this module expects."""
    terminate = inspect.getsource(_FLOWER_TERMINATE)
    if "self.pool.terminate_all_actors()" not in terminate or "ray.shutdown()" not in terminate:
        raise RuntimeError("flwr's RayBackend.terminate changed; testbed.federated.actor_pool needs updating")
    build = inspect.getsource(_FLOWER_BUILD)
    if "self.pool = BasicActorPool(" not in build or "self.app_fn = app_fn" not in build:
        raise RuntimeError("flwr's RayBackend.build changed; testbed.federated.actor_pool needs updating")


@contextmanager
def _replaced(name: str, ours: Callable[..., Any], flowers: Callable[..., Any]) -> Iterator[None]:
    """`RayBackend.<name>` is ``ours`` while the block runs, Flower's own again after it."""
    with _INSTALL_LOCK:
        setattr(RayBackend, name, ours)
    try:
        yield
    finally:
        with _INSTALL_LOCK:
            setattr(RayBackend, name, flowers)


@contextmanager
def ray_outlives_simulation() -> Iterator[None]:
    """Within the block, a Flower simulation that ends leaves Ray running (and its idle actors to
    `shared_client_actors`, when that block is open too)."""
    _check_flower_backend()
    with _replaced("terminate", _terminate_actors_only, _FLOWER_TERMINATE):
        yield


@contextmanager
def shared_client_actors() -> Iterator[None]:
    """Within the block, the client actors of a simulation that ended serve the next one that asks
    for the same resources on the same Ray; those still kept at its end are killed. A block opened
    inside another leaves them to the outer one (a shared sweep process's, around its runs')."""
    global _kept
    _check_flower_backend()
    with _INSTALL_LOCK:
        nested = _kept is not None
        if not nested:
            _kept = {}
    if nested:
        yield
        return
    try:
        with _replaced("build", _build_reusing, _FLOWER_BUILD):
            yield
    finally:
        with _INSTALL_LOCK:
            pools, _kept = list((_kept or {}).values()), None
        for pool in pools:
            pool.terminate_all_actors()
