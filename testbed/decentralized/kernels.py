"""The three algorithms as pure functions of node states; every backend calls these and only these.

Node vectors are ``[model | audit block]``: the model's flat parameters, then one coordinate per
canary (`testbed.decentralized.audit`). The loss ignores the audit block, so its gradient there is
zero except for the canaries node ``source`` inserts; the noise covers the whole vector.

* Random walk (Cyffers, Bellet, Upadhyay, ICML 2024, RW DP-SGD; "contribute, then only add noise",
  their Remark on the contribution cap): `walk_visit`. The holder v of the token at step t takes
  theta <- theta - lr (g_v + N(0, (sigma C)^2 I)), g_v its clipped mean gradient while it has
  contributed fewer than ``cap`` times and 0 afterwards, then the token moves along W.
* Gossip (Muffliato-GD, Cyffers, Even, Bellet, Massoulie, NeurIPS 2022): `gossip_local_update` on
  every node, then ``rounds`` calls of `gossip_round`: Y_{t+1} = W Y_t, or with Chebyshev
  acceleration Y_1 = W Y_0, Y_{t+1} = gamma W Y_t + (1 - gamma) Y_{t-1}.
* Local DP: `local_dp_releases` (every node's noisy clipped gradient at the shared model), then
  `local_dp_apply` (the exact mean of all releases, which are public).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from testbed.decentralized.phase import Phase
from testbed.decentralized.problem import Problem, batch_mask, noise
from testbed.seeding import Stream, stream


def _updates(problem: Problem, phase: Phase, params: torch.Tensor, nodes, counters) -> torch.Tensor:
    """Clipped mean gradients of ``nodes`` at ``params`` [b, D] (model part), with the canaries
    (clip * inclusion bits) in the audit block of the source node: the noiseless update [b, D]."""
    assert problem.data is not None and problem.spec is not None  # a training problem (built with data)
    block = problem.data.block(nodes)
    mask = batch_mask(block, phase.batch_size, problem.seed, counters)
    size = problem.spec.num_params
    updates = torch.zeros(len(nodes), problem.dimension)
    updates[:, :size] = problem.model.clipped_mean_gradient(params[:, :size], block.x, block.y, mask, phase.clip)
    for row, node in enumerate(nodes):
        if node == phase.source and phase.canaries:
            updates[row, size:] = phase.clip * phase.inclusion
    return updates


@dataclass(frozen=True)
class ReleaseNoise:
    """The two keyed streams of one kind of release: its model part and its audit block."""

    model: Stream
    audit: Stream


WALK_NOISE = ReleaseNoise(stream("walk.noise", "the walk holder's release noise at a step (model part), keyed by step"),
                          stream("walk.noise.audit", "the walk holder's release noise at a step (audit block)"))
GOSSIP_NOISE = ReleaseNoise(
    stream("gossip.noise", "a node's gossip release noise (model part), keyed by (node, iteration)"),
    stream("gossip.noise.audit", "a node's gossip release noise (audit block), keyed by (node, iteration)"))
LOCAL_DP_NOISE = ReleaseNoise(
    stream("local_dp.noise", "a node's local-DP public release noise (model part), keyed by (node, iteration)"),
    stream("local_dp.noise.audit", "a node's local-DP public release noise (audit block), keyed by (node, iteration)"))


def release_noise(problem: Problem, streams: ReleaseNoise, *keys: int) -> torch.Tensor:
    """The standard normal vector [D] of one release: the model part and the audit block come from
    separate keyed streams, so adding canaries leaves the model's noise (and training) unchanged."""
    assert problem.spec is not None  # a training problem (built with data)
    size, canaries = problem.spec.num_params, problem.config.audit.canaries
    model = noise(problem.seed, streams.model, size, *keys)
    return torch.cat([model, noise(problem.seed, streams.audit, canaries, *keys)]) if canaries else model


def _noises(problem: Problem, streams: ReleaseNoise, nodes, step: int) -> torch.Tensor:
    """One keyed standard normal vector per node for this step, [b, D]."""
    return torch.stack([release_noise(problem, streams, node, step) for node in nodes])


def walk_visit(problem: Problem, phase: Phase, token: torch.Tensor, step: int,
               contributions: int) -> tuple[torch.Tensor, bool]:
    """Step ``step`` of the walk by its holder ``phase.path[step]``, which has contributed
    ``contributions`` times so far; returns the token it forwards and whether it contributed."""
    assert phase.path is not None  # a random-walk phase
    node = int(phase.path[step])
    contributes = contributions < phase.cap
    if contributes:
        update = _updates(problem, phase, token[None], [node], [contributions])[0]
    else:
        update = torch.zeros(problem.dimension)
    update += phase.noise_scale * release_noise(problem, WALK_NOISE, step)
    return token - phase.args.lr * update, contributes


def gossip_local_update(problem: Problem, phase: Phase, params: torch.Tensor, nodes, iteration: int) -> torch.Tensor:
    """The noisy local step of ``nodes`` (rows of ``params``) at ``iteration``: Y_0 rows."""
    updates = _updates(problem, phase, params, nodes, [iteration] * len(nodes))
    updates += phase.noise_scale * _noises(problem, GOSSIP_NOISE, nodes, iteration)
    return params - phase.args.lr * updates


def gossip_round(walk_rows: torch.Tensor, messages: torch.Tensor, previous_rows: torch.Tensor | None,
                 gamma: float) -> torch.Tensor:
    """One synchronous round for the nodes whose rows of W are ``walk_rows`` [b, n]: every node
    mixes the messages Y_t [n, D] of all nodes (only its neighbours' have weight); with
    ``previous_rows`` (its own Y_{t-1}) and gamma != 1, the Chebyshev recurrence."""
    mixed = walk_rows @ messages
    if previous_rows is None or gamma == 1.0:
        return mixed
    return gamma * mixed + (1.0 - gamma) * previous_rows


def local_dp_releases(problem: Problem, phase: Phase, params: torch.Tensor, nodes, iteration: int) -> torch.Tensor:
    """Every node's public release at ``iteration``: clipped mean gradient at the shared model plus
    N(0, (sigma C)^2 I), [b, D]."""
    shared = params.expand(len(nodes), -1)
    updates = _updates(problem, phase, shared, nodes, [iteration] * len(nodes))
    return updates + phase.noise_scale * _noises(problem, LOCAL_DP_NOISE, nodes, iteration)


def local_dp_apply(params: torch.Tensor, releases: torch.Tensor, lr: float) -> torch.Tensor:
    """The shared model after one step along the mean of all nodes' releases [n, D]."""
    return params - lr * releases.mean(dim=0)


def walk_rows(problem: Problem, nodes) -> torch.Tensor:
    """Rows of W for ``nodes``, as float32 like the node vectors."""
    return torch.from_numpy(np.ascontiguousarray(problem.walk[np.asarray(nodes)], dtype=np.float32))
