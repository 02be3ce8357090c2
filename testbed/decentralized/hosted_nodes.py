"""Nodes hosted by the engine's actors (`Engine.actors`), one actor per block of nodes.

Used whenever the run's engine offers ``actors`` (``engine: {type: ray}``, or ``type: local`` with
``use_ray: always``). The driver creates one `NodeHost` per worker of the engine (at most one per
node), spread over its machines, and keeps only what it evaluates:

* random walk: each step is a call ``visit(token, step)`` on the actor hosting the holder, with
  the previous visit's future as the token, so the token travels actor to actor (through Ray's
  object store) and the driver waits only at evaluation steps and at the end of the chunk;
* gossip: every actor computes the noisy local step of its nodes, then in each round its rows of
  the next messages from the messages of all nodes (and scores the canaries as a receiver);
* local DP: every actor computes its nodes' releases; the driver averages them.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.decentralized import kernels, steps
from testbed.decentralized.backends import blocks, host_rows, merge_rows, prepared
from testbed.decentralized.phase import PhaseArgs
from testbed.determinism import single_threaded
from testbed.engines.base import Engine


class NodeHost:
    """An actor hosting a block of nodes: their data, counters and attackers."""

    def __init__(self, scenario_data: dict, nodes: list[int]):
        torch.set_num_threads(1)  # the same floats as every other engine
        self.scenario_data, self.nodes = scenario_data, np.asarray(nodes)
        self.previous: torch.Tensor | None = None

    def begin(self, args: PhaseArgs, state: dict) -> None:
        self.problem, self.phase, self.attack = prepared(self.scenario_data, args)
        self.state = {key: value.clone() for key, value in state.items()}

    def visit(self, token: torch.Tensor, step: int) -> torch.Tensor:
        self.state["token"] = token
        steps.walk_step(self.problem, self.phase, self.state, step, self.attack)
        return self.state["token"]

    def gossip_update(self, params: torch.Tensor, iteration: int) -> torch.Tensor:
        self.previous = None
        return kernels.gossip_local_update(self.problem, self.phase, params[self.nodes], self.nodes, iteration)

    def gossip_round(self, messages: torch.Tensor, round_index: int) -> torch.Tensor:
        rows = steps.gossip_mix(self.problem, self.phase, self.state, messages, self.nodes, self.attack,
                                round_index, self.previous)
        self.previous = messages[self.nodes]
        return rows

    def local_dp_releases(self, params: torch.Tensor, iteration: int) -> torch.Tensor:
        return kernels.local_dp_releases(self.problem, self.phase, params, self.nodes, iteration)

    def export(self) -> tuple[np.ndarray, dict]:
        return self.nodes, host_rows(self.phase.args.algorithm, self.state, self.nodes)


class HostedNodes:
    """Actors hosting the nodes of one run; use as a context manager (actors stopped on exit)."""

    def __init__(self, engine: Engine, scenario_data: dict, n: int):
        self.engine, self.scenario_data = engine, scenario_data
        self.blocks = blocks(n, engine.workers())
        self.hosts = engine.actors(NodeHost, [(scenario_data, block.tolist()) for block in self.blocks])
        self.owner = np.empty(n, dtype=np.int64)
        for index, block in enumerate(self.blocks):
            self.owner[block] = index

    def __enter__(self) -> HostedNodes:
        return self

    def __exit__(self, *exc_info) -> None:
        self.hosts.close()

    def run_chunk(self, args: PhaseArgs, state: dict, start: int, stop: int) -> tuple[dict, list[dict]]:
        """Steps start..stop of one algorithm on the actors; returns the state and the records."""
        get = self.engine.get
        with single_threaded():
            problem, phase, _ = prepared(self.scenario_data, args)
            get(self.hosts.broadcast("begin", args, state))
            run = {"random_walk": self._walk, "gossip": self._gossip, "local_dp": self._local_dp}[args.algorithm]
            records = run(problem, phase, state, start, stop)
            parts = get(self.hosts.broadcast("export"))
            merge_rows(state, [(nodes, rows) for nodes, rows in parts])
            return state, records

    def _walk(self, problem, phase, state, start, stop) -> list[dict]:
        get, token, records = self.engine.get, self.engine.put(state["token"]), []
        for step in range(start, stop):
            token = self.hosts.call(int(self.owner[phase.path[step]]), "visit", token, step)
            if steps.is_eval_step(phase, step + 1):
                state["token"] = get(token)
                records.append({"step": step + 1, **steps.evaluate(problem, phase, state)})
        state["token"] = get(token)
        return records

    def _gossip(self, problem, phase, state, start, stop) -> list[dict]:
        get, put, records = self.engine.get, self.engine.put, []
        for iteration in range(start, stop):
            messages = torch.cat(get(self.hosts.broadcast("gossip_update", put(state["params"]), iteration)))
            for round_index in range(phase.rounds):
                messages = torch.cat(get(self.hosts.broadcast("gossip_round", put(messages), round_index)))
            state["params"] = messages
            if steps.is_eval_step(phase, iteration + 1):
                records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
        return records

    def _local_dp(self, problem, phase, state, start, stop) -> list[dict]:
        get, records = self.engine.get, []
        for iteration in range(start, stop):
            releases = torch.cat(get(self.hosts.broadcast("local_dp_releases", self.engine.put(state["params"]),
                                                          iteration)))
            steps.local_dp_step(problem, phase, state, iteration, releases)
            if steps.is_eval_step(phase, iteration + 1):
                records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
        return records
