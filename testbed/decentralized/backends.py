"""Where the nodes run: vectorised in one process, on the engine's actors, or on its SPMD ranks.

All three call the same step functions (`testbed.decentralized.steps`) on the same keyed random
numbers, so for one seed they give the same model to float tolerance (tests/decentralized checks
it). A chunk of steps takes the state at ``start`` and returns the state at ``stop`` and the
evaluation records in between; the driver alone writes the run folder.

* local: `local_chunk`, one engine call per chunk; gossip and local DP treat all nodes as one
  ``[n, D]`` tensor.
* actors: `testbed.decentralized.hosted_nodes`, one actor per block of nodes (as many blocks as the
  engine has workers, spread over its machines). The token goes from actor to actor (each visit
  takes the previous visit's future), reaching the driver only when it evaluates; for gossip each
  actor mixes its rows of every round from the messages the driver collects.
* spmd: `testbed.decentralized.spmd_nodes`, run on every rank by `Engine.spmd` (the `mpi` engine); rank r
  hosts a contiguous block of nodes, the token moves by point-to-point sends between the ranks of
  consecutive holders, gossip messages by ``allgather``; rank 0 evaluates and returns the state.
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import torch

from testbed.decentralized import steps
from testbed.decentralized.phase import Phase, PhaseArgs, build_phase
from testbed.decentralized.problem import Problem, build_problem
from testbed.determinism import single_threaded


@lru_cache(maxsize=4)
def _prepared(scenario_json: str, args: PhaseArgs) -> tuple[Problem, Phase, steps.Attack]:
    problem = build_problem(json.loads(scenario_json))
    phase = build_phase(problem, args)
    return problem, phase, steps.Attack(problem, phase)


def prepared(scenario_data: dict, args: PhaseArgs) -> tuple[Problem, Phase, steps.Attack]:
    """Problem, phase and attack weights, built once per process and reused by later chunks."""
    return _prepared(json.dumps(scenario_data, sort_keys=True), args)


def blocks(n: int, parts: int) -> list[np.ndarray]:
    """Contiguous blocks of node ids, one per host."""
    return [block for block in np.array_split(np.arange(n), min(parts, n))]


def _record(problem: Problem, phase: Phase, state: dict, step: int) -> dict:
    return {"step": step, **steps.evaluate(problem, phase, state)}


def local_chunk(scenario_data: dict, args: PhaseArgs, state: dict, start: int, stop: int) -> tuple[dict, list[dict]]:
    """Steps start..stop of one algorithm in this process, all nodes vectorised."""
    with single_threaded():
        problem, phase, attack = prepared(scenario_data, args)
        step = {"random_walk": steps.walk_step, "gossip": steps.gossip_step,
                "local_dp": lambda p, ph, s, k, a: steps.local_dp_step(p, ph, s, k)}[args.algorithm]
        records = []
        for index in range(start, stop):
            step(problem, phase, state, index, attack)
            if steps.is_eval_step(phase, index + 1):
                records.append(_record(problem, phase, state, index + 1))
        return state, records


def merge_rows(state: dict, parts: list[tuple[np.ndarray, dict]]) -> None:
    """Copy each host's rows of the node-indexed arrays into ``state`` (in place)."""
    for nodes, rows in parts:
        index = torch.as_tensor(np.array(nodes))  # a copy: arrays from Ray's object store are read-only
        for key, value in rows.items():
            state[key][index] = value


def host_rows(algorithm: str, state: dict, nodes: np.ndarray) -> dict:
    """The rows of ``nodes`` of the arrays a host updates for its own nodes."""
    index = torch.as_tensor(np.array(nodes))
    return {key: state[key][index] for key in steps.NODE_KEYS[algorithm]}
