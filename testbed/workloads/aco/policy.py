"""Acquisition policies: the acquisition conditioned oracle (ACO), greedy one-step, random order.

ACO (Valancius, Lennon, Oliva, ICML 2024, Eq. of the oracle ``u*(x_o)``): with the features ``o``
acquired so far,

    u* = argmin_{u subset of unobserved}  E_{(x_u, y) ~ p(. | x_o)} [ loss(yhat(x_{o+u}), y) ] + alpha |o+u|

and if ``u*`` is empty the policy stops and predicts, else it acquires one feature of ``u*`` and
solves again (receding horizon). The approximate variant estimates the expectation by the ``k``
nearest training instances matched on the observed coordinates only, takes the unobserved values
from those neighbours, and predicts with a classifier for arbitrary subsets. Among the new features
of ``u*`` it acquires the one whose single addition has the lowest estimated loss.

Greedy (the baseline) uses the same estimator but only candidates ``u`` of one feature: it stops
as soon as no single feature pays for its cost, so jointly-informative features defeat it.
Greedy at ACO's budget (``greedy_budget``, an ablation) makes greedy's one-feature choice without
its stopping rule, until it holds as many features as ACO acquired on the same instance: it
separates what ACO gains by buying more features from what it gains by choosing them jointly.
Random acquires features in random order, as many as ACO acquired on the same instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from testbed.workloads.aco.masked import MaskedClassifier

Chooser = Callable[[torch.Tensor, torch.Tensor], int | None]


@dataclass(frozen=True)
class AcquisitionSettings:
    """Cost per feature (alpha), neighbours k, and how candidate subsets are enumerated."""

    cost: float
    neighbours: int
    exhaustive_up_to: int  # enumerate every subset while at most this many features are unobserved
    random_candidates: int  # otherwise: all single features plus this many random subsets


class NeighbourOracle:
    """The kNN estimate of ``E[loss | x_o] + alpha |mask|`` for candidate masks of one instance."""

    def __init__(self, model: MaskedClassifier, x_train: torch.Tensor, y_train: torch.Tensor,
                 settings: AcquisitionSettings, tie_order: torch.Tensor):
        self.model, self.settings = model, settings
        # Training instances in a fixed random order, so equal distances (nothing observed yet)
        # select a random, reproducible neighbour set rather than the first rows of the file.
        self.x_train, self.y_train = x_train[tie_order], y_train[tie_order]

    def neighbours(self, x: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """Indices of the ``k`` training instances closest to ``x`` on the observed coordinates."""
        distance = (((self.x_train - x) * observed.to(x.dtype)) ** 2).sum(dim=1)
        return torch.argsort(distance, stable=True)[: self.settings.neighbours]

    @torch.no_grad()
    def scores(self, x: torch.Tensor, observed: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Estimated loss plus cost of each candidate mask (rows of ``candidates``, supersets of ``observed``)."""
        nearest = self.neighbours(x, observed)
        # The instance's own values where observed; the neighbours' values stand in for the rest.
        values = torch.where(observed, x, self.x_train[nearest])  # (k, d)
        count, k = len(candidates), len(nearest)
        inputs = values.expand(count, k, -1).reshape(count * k, -1)
        masks = candidates[:, None, :].expand(count, k, -1).reshape(count * k, -1)
        labels = self.y_train[nearest].repeat(count)
        losses = F.cross_entropy(self.model(inputs, masks), labels, reduction="none").view(count, k)
        return losses.mean(dim=1) + self.settings.cost * candidates.sum(dim=1).to(losses.dtype)


def one_more(observed: torch.Tensor) -> torch.Tensor:
    """The masks ``observed + {j}`` for every unobserved ``j``, one per row."""
    remaining = torch.nonzero(~observed).flatten()
    masks = observed.expand(len(remaining), -1).clone()
    masks[torch.arange(len(remaining)), remaining] = True
    return masks


def candidate_masks(observed: torch.Tensor, settings: AcquisitionSettings, generator: torch.Generator) -> torch.Tensor:
    """Candidate masks ``o + u``; row 0 is ``o`` itself (the "stop" candidate)."""
    remaining = torch.nonzero(~observed).flatten()
    count = len(remaining)
    if count <= settings.exhaustive_up_to:
        codes = torch.arange(2**count)
        picks = ((codes[:, None] >> torch.arange(count)) & 1).bool()  # row 0 is the empty subset
    else:
        sizes = torch.randint(1, count + 1, (settings.random_candidates, 1), generator=generator)
        ranks = torch.rand(settings.random_candidates, count, generator=generator).argsort(1).argsort(1)
        picks = torch.cat([torch.zeros(1, count, dtype=torch.bool), torch.eye(count, dtype=torch.bool),
                           ranks < sizes])
    masks = observed.expand(len(picks), -1).clone()
    masks[:, remaining] = picks
    return masks


def first_choice_shared(choose: Chooser) -> Chooser:
    """Compute the decision with nothing observed once: it cannot depend on the instance.

    With no observed coordinate every training instance is equally near, so the neighbour set,
    the values standing in for the features and hence the decision are the same for every x.
    """
    first: list[int | None] = []

    def shared(x: torch.Tensor, observed: torch.Tensor) -> int | None:
        if observed.any():
            return choose(x, observed)
        if not first:
            first.append(choose(x, observed))
        return first[0]

    return shared


def aco_chooser(oracle: NeighbourOracle, generator: torch.Generator) -> Chooser:
    """ACO: best subset by estimated loss + cost; acquire its best single feature, or stop."""

    @first_choice_shared
    def choose(x: torch.Tensor, observed: torch.Tensor) -> int | None:
        candidates = candidate_masks(observed, oracle.settings, generator)
        best = int(torch.argmin(oracle.scores(x, observed, candidates)))  # ties: the first, i.e. stop
        if best == 0:
            return None
        new = torch.nonzero(candidates[best] & ~observed).flatten()
        singles = observed.expand(len(new), -1).clone()
        singles[torch.arange(len(new)), new] = True
        return int(new[torch.argmin(oracle.scores(x, observed, singles))])

    return choose


def greedy_chooser(oracle: NeighbourOracle, stop: bool = True) -> Chooser:
    """Greedy: the single feature with the lowest estimated loss + cost, or stop if none beats stopping.

    ``stop=False``: never stop (the rollout's budget decides when to), the matched-budget ablation.
    """

    @first_choice_shared
    def choose(x: torch.Tensor, observed: torch.Tensor) -> int | None:
        singles = one_more(observed)
        if not stop:
            return int(torch.nonzero(~observed).flatten()[int(torch.argmin(oracle.scores(x, observed, singles)))])
        best = int(torch.argmin(oracle.scores(x, observed, torch.cat([observed[None], singles]))))
        return None if best == 0 else int(torch.nonzero(~observed).flatten()[best - 1])

    return choose


def random_chooser(generator: torch.Generator) -> Chooser:
    """A uniformly random unobserved feature (the rollout's budget decides when to stop)."""

    def choose(x: torch.Tensor, observed: torch.Tensor) -> int | None:
        remaining = torch.nonzero(~observed).flatten()
        return int(remaining[torch.randint(len(remaining), (1,), generator=generator)])

    return choose


def rollout(choose: Chooser, x: torch.Tensor, budget: int | None = None) -> list[int]:
    """Acquire features of ``x`` until the policy stops, all are observed, or ``budget`` is spent."""
    observed = torch.zeros(len(x), dtype=torch.bool)
    order: list[int] = []
    limit = len(x) if budget is None else min(budget, len(x))
    while len(order) < limit:
        feature = choose(x, observed)
        if feature is None:
            break
        if observed[feature]:
            raise RuntimeError(f"policy re-acquired feature {feature}")
        observed[feature] = True
        order.append(feature)
    return order
