"""The ``ray`` backend: nodes hosted by Ray actors, one actor per block of nodes.

Used whenever the run's engine has a Ray cluster (``engine: {type: ray}``, or ``type: local`` with
``use_ray: always``). The driver creates one `NodeHost` per CPU of the cluster (at most one per
node), spread over its machines, and keeps only what it evaluates:

* random walk: each step is a call ``visit(token_ref, step)`` on the actor hosting the holder, with
  the previous visit's ObjectRef as the token, so the token travels actor to actor through the
  object store and the driver waits only at evaluation steps and at the end of the chunk;
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


class NodeHost:
    """A Ray actor hosting a block of nodes: their data, counters and attackers."""

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


class RayNodes:
    """Actors hosting the nodes of one run; use as a context manager (actors killed on exit)."""

    def __init__(self, scenario_data: dict, n: int):
        import ray

        self.scenario_data = scenario_data
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.blocks = blocks(n, cpus)
        remote = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(NodeHost)
        self.hosts = [remote.remote(scenario_data, block.tolist()) for block in self.blocks]
        self.owner = np.empty(n, dtype=np.int64)
        for index, block in enumerate(self.blocks):
            self.owner[block] = index

    def __enter__(self) -> "RayNodes":
        return self

    def __exit__(self, *exc_info) -> None:
        import ray

        for host in self.hosts:
            ray.kill(host)

    def run_chunk(self, args: PhaseArgs, state: dict, start: int, stop: int) -> tuple[dict, list[dict]]:
        """Steps start..stop of one algorithm on the actors; returns the state and the records."""
        import ray

        with single_threaded():
            problem, phase, _ = prepared(self.scenario_data, args)
            ray.get([host.begin.remote(args, state) for host in self.hosts])
            run = {"random_walk": self._walk, "gossip": self._gossip, "local_dp": self._local_dp}[args.algorithm]
            records = run(problem, phase, state, start, stop)
            parts = ray.get([host.export.remote() for host in self.hosts])
            merge_rows(state, [(nodes, rows) for nodes, rows in parts])
            return state, records

    def _walk(self, problem, phase, state, start, stop) -> list[dict]:
        import ray

        token, records = ray.put(state["token"]), []
        for step in range(start, stop):
            token = self.hosts[self.owner[phase.path[step]]].visit.remote(token, step)
            if steps.is_eval_step(phase, step + 1):
                state["token"] = ray.get(token)
                records.append({"step": step + 1, **steps.evaluate(problem, phase, state)})
        state["token"] = ray.get(token)
        return records

    def _gossip(self, problem, phase, state, start, stop) -> list[dict]:
        import ray

        records = []
        for iteration in range(start, stop):
            params = ray.put(state["params"])
            messages = torch.cat(ray.get([h.gossip_update.remote(params, iteration) for h in self.hosts]))
            for round_index in range(phase.rounds):
                sent = ray.put(messages)
                messages = torch.cat(ray.get([h.gossip_round.remote(sent, round_index) for h in self.hosts]))
            state["params"] = messages
            if steps.is_eval_step(phase, iteration + 1):
                records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
        return records

    def _local_dp(self, problem, phase, state, start, stop) -> list[dict]:
        import ray

        records = []
        for iteration in range(start, stop):
            params = ray.put(state["params"])
            releases = torch.cat(ray.get([h.local_dp_releases.remote(params, iteration) for h in self.hosts]))
            steps.local_dp_step(problem, phase, state, iteration, releases)
            if steps.is_eval_step(phase, iteration + 1):
                records.append({"step": iteration + 1, **steps.evaluate(problem, phase, state)})
        return records


__all__ = ["RayNodes", "host_rows"]
