"""Everything one algorithm of a run needs besides the node states: its resolved settings.

A `Phase` is built the same way in every process (driver, Ray actor, MPI rank) from the problem
and a small `PhaseArgs` the driver decides (the noise multiplier, possibly calibrated, and the step
the privacy budget lets the run reach), so the walk path, the canaries and the gossip polynomial
are identical everywhere without being shipped around.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from testbed.decentralized.config import DecentralizedConfig
from testbed.decentralized.problem import Problem, keyed_generator
from testbed.seeding import stream
from testbed.topologies import spectral_gap

if TYPE_CHECKING:  # the structure a privacy plan reads (`structure`) imports no torch; a built phase does
    import torch

INCLUSION = stream("audit.inclusion", "which canaries the one-run audit includes (each with probability 1/2)")


@dataclass(frozen=True)
class PhaseArgs:
    """What the driver decides for an algorithm: its loop settings, noise and stopping step."""

    algorithm: str
    lr: float
    sigma: float
    stop: int  # steps run: the planned steps, or fewer when the privacy target stops the run
    planned: int
    eval_every: int


@dataclass
class Phase:
    """The resolved settings of one algorithm on one problem."""

    args: PhaseArgs
    clip: float
    batch_size: int | None
    cap: int  # random walk: gradient contributions per node before it only adds noise
    rounds: int  # gossip: averaging rounds per iteration
    gamma: float  # gossip: Chebyshev momentum (1 = plain gossip)
    source: int  # audit: node hosting the canaries
    inclusion: torch.Tensor  # audit: 0/1 per canary, drawn with probability 1/2
    path: np.ndarray | None  # random walk: holder of the token at each step 0..planned

    @property
    def canaries(self) -> int:
        return int(self.inclusion.numel())

    @property
    def noise_scale(self) -> float:
        """Standard deviation of the Gaussian noise added to a release: sigma * C."""
        return self.args.sigma * self.clip


_GAPS: dict[tuple[tuple[int, ...], str], float] = {}


def _spectral_gap(walk: np.ndarray) -> float:
    """`spectral_gap`, remembered per walk: a dense eigendecomposition that every phase of a run
    (and every variant a sweep validates) would otherwise repeat."""
    key = (walk.shape, hashlib.sha256(np.ascontiguousarray(walk).tobytes()).hexdigest())
    if key not in _GAPS:
        if len(_GAPS) >= 4:
            _GAPS.pop(next(iter(_GAPS)))
        _GAPS[key] = spectral_gap(walk)
    return _GAPS[key]


def muffliato_rounds(walk: np.ndarray, sigma: float, accelerated: bool) -> int:
    """Gossip rounds per averaging: ceil(gap^-1/2 ln(n max(1/4, sigma^2)/sigma^2)) accelerated,
    gap^-1 instead of gap^-1/2 otherwise (Muffliato's released code, `graphutils.T_mix`)."""
    gap, n = _spectral_gap(walk), walk.shape[0]
    scale = 1.0 / math.sqrt(gap) if accelerated else 1.0 / gap
    return max(1, math.ceil(scale * math.log(n * max(0.25, sigma**2) / sigma**2)))


def chebyshev_momentum(walk: np.ndarray) -> float:
    """gamma = 2 (1 - sqrt(g (1 - g/4))) / (1 - g/2)^2 with g the spectral gap: the momentum of
    Muffliato's accelerated gossip (`gamma_tcheb` in its released code)."""
    gap = _spectral_gap(walk)
    return 2.0 * (1.0 - math.sqrt(gap * (1.0 - gap / 4.0))) / (1.0 - gap / 2.0) ** 2


def walk_path(walk: np.ndarray, root: int, steps: int) -> np.ndarray:
    """Holders of the token at steps 0..steps: a uniform start (the stationary law of a doubly
    stochastic W), then one move along W per step, from uniforms keyed by the root seed."""
    generator = np.random.default_rng(np.random.SeedSequence([root, 0x5A1C]))
    uniforms = generator.random(steps + 1)
    cumulative = np.cumsum(walk, axis=1)
    path = np.empty(steps + 1, dtype=np.int64)
    path[0] = min(int(uniforms[0] * walk.shape[0]), walk.shape[0] - 1)
    for t in range(steps):
        row = cumulative[path[t]]
        path[t + 1] = min(int(np.searchsorted(row, uniforms[t + 1] * row[-1], side="right")), len(row) - 1)
    return path


def structure(config: DecentralizedConfig, walk: np.ndarray, planned: int) -> tuple[int, int, float]:
    """(contribution cap, gossip rounds, Chebyshev momentum): what the accountant needs besides sigma."""
    n = walk.shape[0]
    cap = config.random_walk.contributions_cap or math.ceil(config.random_walk.cap_factor * planned / n)
    accelerated = config.gossip.accelerated
    if "gossip" not in config.algorithms:
        # Only gossip uses rounds and momentum; their spectral gap is a dense eigendecomposition
        # (seconds at n = 2048), which a walk-only scenario should not pay for.
        return cap, config.gossip.rounds or 1, 1.0
    # sigma = 1 makes the default ln(n)/gap^p: it must not depend on a sigma calibrated from it.
    rounds = config.gossip.rounds or muffliato_rounds(walk, 1.0, accelerated)
    gamma = chebyshev_momentum(walk) if accelerated else 1.0
    return cap, rounds, gamma


def build_phase(problem: Problem, args: PhaseArgs) -> Phase:
    """The `Phase` of ``args`` on ``problem``."""
    import torch

    config, walk = problem.config, problem.walk
    cap, rounds, gamma = structure(config, walk, args.planned)
    canaries = config.audit.canaries
    inclusion = (torch.rand(canaries, generator=keyed_generator(problem.seed, INCLUSION)) < 0.5).float()
    path = walk_path(walk, problem.seed, args.planned) if args.algorithm == "random_walk" else None
    return Phase(args, config.clip, config.batch_size, cap, rounds, gamma, config.audit.source, inclusion, path)
