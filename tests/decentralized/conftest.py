"""Fixtures: a tiny decentralized scenario (8 nodes on a hypercube, breast-cancer shards)."""

from __future__ import annotations

import copy

import pytest

TINY = {
    "name": "dec-tiny", "kind": "decentralized", "seed": 3,
    "data": {"dataset": "breast_cancer", "num_clients": 8},
    "decentralized": {
        "algorithm": ["random_walk", "gossip", "local_dp"],
        "topology": {"name": "hypercube", "dim": 3},
        "sigma": 1.0, "lr": 0.2, "steps": 6, "eval_every": 3, "checkpoint_every": 3,
        "random_walk": {"steps": 40, "eval_every": 10, "checkpoint_every": 20},
        "gossip": {"rounds": 3, "accelerated": True},
        "audit": {"canaries": 20, "source": 2},
        "comparison": {"enabled": False},
    },
    "report": {"kind": "privacy"},
}


@pytest.fixture
def tiny_scenario() -> dict:
    """A fresh copy of the tiny scenario mapping (edit it freely)."""
    return copy.deepcopy(TINY)
