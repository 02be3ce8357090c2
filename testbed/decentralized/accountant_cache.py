"""The accountants a decentralized scenario's check plans with, kept between commands (the
``accountants`` cache of `testbed.cache`).

Validating a scenario plans each algorithm's noise and stopping step (`driver.plan`) on its
accountant at sigma = 1 (`driver.unit_rho`): most of validating a large graph (two random walks of
5,000 and 20,000 steps on 512 and 2048 nodes, fig2_paper's, take 0.4 s of its 1.4). The accountant's
per-step arrays (the largest pairwise rho and its pair, the local ceiling: 0.6 MB at 20,000 steps)
are kept as a small ``.npz`` keyed by all it depends on (the walk matrix's digest, the symmetry the
graph recorded, which picks the translated computation, the algorithm, the steps, the walk's
structure, the sensitivity, the accounting) and by the code that computes it (this package and the
topologies library) with the numpy, scipy and networkx versions: an edit or an upgrade is a new key.

Only the check reads an entry: a run computes its own accountant, so no run's numbers come from this
cache (its first plan of a key writes the entry for the next validation). ``TESTBED_ACCOUNTANT_CACHE=off``
turns the cache off.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

import numpy as np

from testbed import topologies
from testbed.cache import cache_root, read_arrays, source_digest, write_arrays
from testbed.decentralized.privacy import UnitRho

SWITCH_ENV = "TESTBED_ACCOUNTANT_CACHE"
LIBRARIES = ("numpy", "scipy", "networkx")


@cache
def _code() -> str:
    """The digest of the code an accountant comes from (read once per process)."""
    folders = (Path(__file__).parent, Path(topologies.__file__).parent)
    return source_digest([path for folder in folders for path in folder.glob("*.py")], LIBRARIES)


def _path(key: tuple) -> Path | None:
    root = cache_root("accountants", SWITCH_ENV)
    return None if root is None else root / f"{hashlib.sha256((repr(key) + _code()).encode()).hexdigest()}.npz"


def read(key: tuple, steps: int) -> UnitRho | None:
    """The accountant kept under ``key`` (over ``steps`` steps), or None (absent, damaged, switched off)."""
    path = _path(key)
    rows = (steps + 1,)
    found = None if path is None else read_arrays(path, {"maximum": ("float64", rows), "pair": ("int64", rows + (2,)),
                                                         "local": ("float64", rows), "order_limited": ("bool", ())})
    if found is None:
        return None
    return UnitRho(found["maximum"], found["pair"], found["local"], None, bool(found["order_limited"]))


def write(key: tuple, unit: UnitRho) -> None:
    """Keep ``unit`` (an accountant without its kept matrix) under ``key``."""
    path = _path(key)
    if path is not None:
        write_arrays(path, {"maximum": unit.maximum, "pair": unit.pair, "local": unit.local,
                            "order_limited": np.asarray(unit.order_limited)})
