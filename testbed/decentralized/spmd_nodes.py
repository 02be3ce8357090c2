"""Nodes hosted by the ranks of an engine that offers ``spmd`` (the `mpi` engine's mpi4py ranks).

`spmd_chunk` runs on every rank at once (`Engine.spmd` broadcasts the call and passes the group's
communicator, which has mpi4py's interface: ``rank``, ``size``, ``send``, ``recv``, ``allgather``,
``gather``). Rank r hosts a contiguous
block of nodes and keeps full-size copies of the state, of which it updates only its nodes' rows:

* random walk: every rank knows the walk path (it comes from the seed), so the rank of the holder
  at step t receives the token from the rank of the holder at t - 1 and, after its visit, sends it
  on; a rank that holds the token at an evaluation step sends a copy to rank 0;
* gossip: the ranks exchange their nodes' messages with ``allgather`` in every round (each rank
  then mixes its own rows); local DP: the releases are gathered the same way and every rank
  applies their mean;
* at the end of the chunk rank 0 gathers the nodes' rows and returns the state and its records.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.decentralized import kernels, steps
from testbed.decentralized.backends import blocks, host_rows, merge_rows, prepared
from testbed.decentralized.phase import PhaseArgs
from testbed.determinism import single_threaded

FORWARD, EVALUATE, FINAL = 1, 2, 3  # message tags; order between two ranks is MPI's non-overtaking rule


def spmd_chunk(comm, scenario_data: dict, args: PhaseArgs, state: dict, start: int,
               stop: int) -> tuple[dict, list[dict]]:
    """Steps start..stop of one algorithm over all ranks of ``comm``; rank 0's return value is the result."""
    with single_threaded():
        problem, phase, attack = prepared(scenario_data, args)
        mine = blocks(problem.n, comm.size)[comm.rank] if comm.rank < problem.n else np.arange(0)
        run = {"random_walk": _walk, "gossip": _gossip, "local_dp": _local_dp}[args.algorithm]
        records = run(comm, problem, phase, attack, state, mine, start, stop)
        parts = comm.gather((mine, host_rows(args.algorithm, state, mine)), root=0)
        if comm.rank == 0:
            merge_rows(state, parts)
        return state, records


def _owners(n: int, size: int) -> np.ndarray:
    owner = np.empty(n, dtype=np.int64)
    for rank, block in enumerate(blocks(n, size)):
        owner[block] = rank
    return owner


def _walk(comm, problem, phase, attack, state, mine, start, stop) -> list[dict]:
    owner, rank, records = _owners(problem.n, comm.size), comm.rank, []
    for step in range(start, stop):
        holder = owner[phase.path[step]]
        if rank == holder:
            if step > start and owner[phase.path[step - 1]] != rank:
                state["token"] = comm.recv(source=owner[phase.path[step - 1]], tag=FORWARD)
            steps.walk_step(problem, phase, state, step, attack)
            if step + 1 < stop and owner[phase.path[step + 1]] != rank:
                comm.send(state["token"], dest=owner[phase.path[step + 1]], tag=FORWARD)
        if steps.is_eval_step(phase, step + 1):
            _to_root(comm, state, holder, EVALUATE)
            if rank == 0:
                records.append({"step": step + 1, **steps.evaluate(problem, phase, state)})
    if stop > start:
        _to_root(comm, state, owner[phase.path[stop - 1]], FINAL)
    return records


def _to_root(comm, state: dict, holder: int, tag: int) -> None:
    """Give rank 0 the token that rank ``holder`` has."""
    if holder == 0:
        return
    if comm.rank == holder:
        comm.send(state["token"], dest=0, tag=tag)
    elif comm.rank == 0:
        state["token"] = comm.recv(source=holder, tag=tag)


def _gossip(comm, problem, phase, attack, state, mine, start, stop) -> list[dict]:
    records = []
    for iteration in range(start, stop):
        rows = kernels.gossip_local_update(problem, phase, state["params"][mine], mine, iteration)
        messages, previous = torch.cat(comm.allgather(rows)), None
        for round_index in range(phase.rounds):
            rows = steps.gossip_mix(problem, phase, state, messages, mine, attack, round_index, previous)
            previous = messages[mine]
            messages = torch.cat(comm.allgather(rows))
        state["params"] = messages
        if steps.is_eval_step(phase, iteration + 1) and comm.rank == 0:
            records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
    return records


def _local_dp(comm, problem, phase, attack, state, mine, start, stop) -> list[dict]:
    records = []
    for iteration in range(start, stop):
        rows = kernels.local_dp_releases(problem, phase, state["params"], mine, iteration)
        steps.local_dp_step(problem, phase, state, iteration, torch.cat(comm.allgather(rows)))
        if steps.is_eval_step(phase, iteration + 1) and comm.rank == 0:
            records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
    return records

