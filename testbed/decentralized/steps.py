"""One step of each algorithm on a node state dict, its evaluation, and its initial state.

A state is a dict of tensors indexed by global node id (so a checkpoint is the same whichever
engine wrote it). Backends keep a full-size copy and touch only the rows of the nodes they host:

* random walk: ``token`` [D], ``contributions`` [n], and the attackers' ``attack_sent`` [n, m],
  ``attack_time`` [n], ``attack_score`` [n, m];
* gossip: ``params`` [n, D] and ``attack_score`` [n, m];
* local DP: ``params`` [D] (the shared model) and ``attack_score`` [m] (every node sees the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from testbed.decentralized import audit, kernels
from testbed.decentralized.phase import Phase
from testbed.decentralized.problem import Problem

# The arrays each host updates only in the rows of its own nodes (merged by node id after a chunk).
NODE_KEYS = {"random_walk": ("contributions", "attack_sent", "attack_time", "attack_score"),
             "gossip": ("attack_score",), "local_dp": ()}


@dataclass
class Attack:
    """The attackers' fixed weights for one phase (empty when the audit is off)."""

    problem: Problem
    phase: Phase

    @cached_property
    def walk_tables(self):
        return audit.walk_attack_tables(self.problem.walk, self.phase.source, self.phase.args.planned)

    @cached_property
    def gossip_weights(self) -> torch.Tensor:
        p = self.phase
        return torch.from_numpy(audit.gossip_attack_weights(self.problem.walk, p.source, p.rounds, p.gamma))

    @cached_property
    def senders(self) -> torch.Tensor:
        return torch.from_numpy(audit.senders(self.problem.walk))


def initial_state(problem: Problem, phase: Phase) -> dict:
    """The state before step 0: every model at the same initialisation, attackers blank."""
    assert problem.spec is not None  # a training problem (built with data)
    init = torch.cat([problem.spec.init(problem.seed), torch.zeros(phase.canaries)])
    n, m = problem.n, phase.canaries
    algorithm = phase.args.algorithm
    if algorithm == "random_walk":
        return {"token": init, "contributions": torch.zeros(n, dtype=torch.int64),
                "attack_sent": torch.zeros(n, m), "attack_time": torch.full((n,), -1, dtype=torch.int64),
                "attack_score": torch.zeros(n, m, dtype=torch.float64)}
    if algorithm == "gossip":
        return {"params": init.repeat(n, 1), "attack_score": torch.zeros(n, m, dtype=torch.float64)}
    return {"params": init, "attack_score": torch.zeros(m, dtype=torch.float64)}


def walk_step(problem: Problem, phase: Phase, state: dict, step: int, attack: Attack) -> None:
    """Step ``step`` of the walk, in place: the holder updates the token, counts its contribution,
    and (audit on) scores the canaries from what it received."""
    assert phase.path is not None and problem.spec is not None  # a random-walk phase of a training problem
    node, size = int(phase.path[step]), problem.spec.num_params
    received = state["token"]
    token, contributed = kernels.walk_visit(problem, phase, received, step, int(state["contributions"][node]))
    if contributed:
        state["contributions"][node] += 1
    if phase.canaries and node != phase.source:
        audit.walk_observe(state, attack.walk_tables, node, step, received[size:], token[size:])
    state["token"] = token


def gossip_mix(problem: Problem, phase: Phase, state: dict, messages: torch.Tensor, nodes, attack: Attack,
               round_index: int, previous_rows: torch.Tensor | None) -> torch.Tensor:
    """Round ``round_index`` for ``nodes``: they receive ``messages`` (Y_t of every node), score the
    canaries, and return their rows of Y_{t+1}."""
    assert problem.spec is not None  # a training problem (built with data)
    if phase.canaries:
        audit.gossip_observe(state["attack_score"], nodes, attack.senders[np.asarray(nodes)],
                             attack.gossip_weights[round_index], messages[:, problem.spec.num_params:])
    return kernels.gossip_round(kernels.walk_rows(problem, nodes), messages, previous_rows, phase.gamma)


def gossip_step(problem: Problem, phase: Phase, state: dict, iteration: int, attack: Attack) -> None:
    """One Muffliato-GD iteration of all nodes, vectorised (the local engine), in place."""
    nodes = np.arange(problem.n)
    messages, previous = kernels.gossip_local_update(problem, phase, state["params"], nodes, iteration), None
    for t in range(phase.rounds):
        following = gossip_mix(problem, phase, state, messages, nodes, attack, t, previous)
        messages, previous = following, messages
    state["params"] = messages


def local_dp_step(problem: Problem, phase: Phase, state: dict, iteration: int,
                  releases: torch.Tensor | None = None) -> None:
    """One local-DP iteration, in place; ``releases`` (all nodes', [n, D]) when computed elsewhere."""
    if releases is None:
        releases = kernels.local_dp_releases(problem, phase, state["params"], np.arange(problem.n), iteration)
    if phase.canaries:
        assert problem.spec is not None  # a training problem (built with data)
        state["attack_score"] += releases[phase.source, problem.spec.num_params:].double()
    state["params"] = kernels.local_dp_apply(state["params"], releases, phase.args.lr)


def evaluate(problem: Problem, phase: Phase, state: dict) -> dict[str, float]:
    """Test accuracy and loss, and training loss on all nodes' data, of the model(s) now: the token,
    the shared model, or the mean over the gossip nodes (with their consensus distance)."""
    # a training problem (built with data)
    assert problem.spec is not None and problem.test_x is not None and problem.test_y is not None
    size, model = problem.spec.num_params, problem.model
    train_x, train_y = problem.train_arrays()
    vector = state["token"] if phase.args.algorithm == "random_walk" else state["params"]
    models = vector[None, :size] if vector.dim() == 1 else vector[:, :size]
    tests = [model.evaluate(p, problem.test_x, problem.test_y) for p in models]
    metrics = {"test_accuracy": float(np.mean([t["accuracy"] for t in tests])),
               "test_loss": float(np.mean([t["loss"] for t in tests])),
               "train_loss": float(np.mean([model.evaluate(p, train_x, train_y)["loss"] for p in models]))}
    if len(models) > 1:
        metrics["consensus_distance"] = float(((models - models.mean(dim=0)) ** 2).sum(dim=1).mean())
    return metrics


def is_eval_step(phase: Phase, step: int) -> bool:
    """Whether a record is written after ``step`` steps (every eval_every, and at the last step)."""
    return step % phase.args.eval_every == 0 or step == phase.args.stop
