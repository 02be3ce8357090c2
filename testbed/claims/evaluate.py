"""Turn a sweep's per-seed final metrics into one verdict per statement of its ``claims:`` block.

An arm is the set of variants whose scenario (the base with the sweep's overrides) has the arm's
values at its keys; arms are paired by the variant's root ``seed``. A statement with ``for_each``
is checked once per value of that key among the variants its arms select (each arm restricted to
it; an arm whose variants lack the key, such as FedAvg without an attack, is shared by every
group), and its verdict is the least favourable of its groups: ``not reproduced`` before
``inconclusive``, ``pending``, ``tie``, ``reproduced`` (each called verdict after its borderline form).

A precondition holds by the same rule as a predicate: where its interval lies above zero. Where it
does not, the group is ``inconclusive``, and the predicate's own call is kept beside it, so that a
result against the claim is never hidden behind the setting. `with_q_values` adjusts the called
verdicts of many statements for multiple comparisons (Benjamini-Hochberg).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.claims.config import ClaimsConfig, Statement
from testbed.claims.expressions import ArmMetrics, Comparison, Expression, parse_comparison, parse_expression
from testbed.claims.statistics import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_REPRODUCED_BORDERLINE,
    PENDING,
    REPRODUCED,
    REPRODUCED_BORDERLINE,
    TIE,
    Interval,
    paired_interval,
    q_values,
    seeds_needed,
)
from testbed.errors import ScenarioError, did_you_mean

_MISSING = object()
SEVERITY = (NOT_REPRODUCED, NOT_REPRODUCED_BORDERLINE, INCONCLUSIVE, PENDING, TIE, REPRODUCED_BORDERLINE, REPRODUCED)
BORDERLINE = {REPRODUCED: REPRODUCED_BORDERLINE, NOT_REPRODUCED: NOT_REPRODUCED_BORDERLINE}
# The verdicts called on an interval, before and after adjustment: the rows a q-value adjusts.
TESTABLE = (REPRODUCED, NOT_REPRODUCED, TIE, REPRODUCED_BORDERLINE, NOT_REPRODUCED_BORDERLINE)
Variants = Mapping[str, Mapping[str, Any]]  # slug -> the variant's raw scenario
Metrics = Mapping[str, Mapping[str, float]]  # slug -> its final metrics (completed variants only)


@dataclass(frozen=True)
class Side:
    """One comparison over the paired seeds: the mean of each side, and the interval of the margin."""

    text: str
    left: float
    right: float
    interval: Interval | None
    margins: tuple[float, ...] = ()  # one per paired seed, positive where the comparison holds
    sides: tuple[tuple[float, float], ...] = ()  # (left, right) on each paired seed

    @property
    def favouring(self) -> int:
        """How many paired seeds have a positive margin (favour the claim, for a predicate)."""
        return sum(m > 0 for m in self.margins)

    @property
    def against(self) -> int:
        """How many paired seeds have a negative margin."""
        return sum(m < 0 for m in self.margins)


@dataclass(frozen=True)
class Detail:
    """A statement's ``secondary`` expression over the same paired seeds: its mean and interval."""

    text: str
    interval: Interval | None


@dataclass(frozen=True)
class GroupVerdict:
    """A statement checked on one group of variants (all of them, or one value of ``for_each``)."""

    group: str | None
    verdict: str
    seeds: list[int]
    predicate: Side | None
    precondition: Side | None
    precondition_holds: bool | None
    secondary: list[Detail] = field(default_factory=list)
    predicate_verdict: str | None = None  # the predicate's own call, whatever the precondition says
    seeds_needed: int | None = None  # for a tie: paired seeds for 80% power at the observed effect
    q: float | None = None  # Benjamini-Hochberg q-value, once `with_q_values` has adjusted the verdict


@dataclass(frozen=True)
class Verdict:
    """A statement, its verdict and the groups it was called on."""

    statement: Statement
    verdict: str
    groups: list[GroupVerdict] = field(default_factory=list)


def dotted(raw: Mapping[str, Any], key: str) -> Any:
    """The value at ``a.b.c`` in a raw scenario, or `_MISSING`."""
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def selects(selector: Mapping[str, Any], raw: Mapping[str, Any]) -> bool:
    """Whether a variant's scenario has every value of an arm's selector."""
    return all(dotted(raw, key) == value for key, value in selector.items())


def arm_seeds(selector: Mapping[str, Any], variants: Variants) -> dict[int, str]:
    """The variants an arm selects, by seed; more than one variant for a seed is ambiguous."""
    chosen: dict[int, str] = {}
    for slug, raw in variants.items():
        if selects(selector, raw):
            seed = int(raw.get("seed", 0))
            if seed in chosen:
                raise ValueError(f"selects two variants for seed {seed} ({chosen[seed]}, {slug}); add a key")
            chosen[seed] = slug
    return chosen


def group_seeds(selector: Mapping[str, Any], extra: Mapping[str, Any], variants: Variants) -> dict[int, str]:
    """The variants an arm selects in a ``for_each`` group (``extra``: the group's key and value). An
    arm whose variants all lack the ``for_each`` key is the same in every group: FedAvg without an
    attack is the no-attack baseline of each attack's group, run once rather than once per attack."""
    chosen = arm_seeds({**selector, **extra}, variants)
    if chosen or not extra:
        return chosen
    shared = arm_seeds(selector, variants)
    if shared and all(dotted(variants[slug], key) is _MISSING for slug in shared.values() for key in extra):
        return shared
    return chosen


def groups(statement: Statement, variants: Variants,
           arms: Mapping[str, Mapping[str, Any]]) -> list[tuple[str | None, dict[str, Any]]]:
    """The groups a statement is checked on: ``(label, extra selector keys)``, one per value of the
    ``for_each`` key among the variants the statement's arms select (a statement about the MarsFL
    threat model is checked on the three attacks that model changes, not on all six)."""
    if statement.for_each is None:
        return [(None, {})]
    selectors = [arms[arm] for arm in _arms_of(statement) if arm in arms]
    values: list[Any] = []
    for raw in variants.values():
        if not any(selects(selector, raw) for selector in selectors):
            continue
        value = dotted(raw, statement.for_each)
        if value is not _MISSING and value not in values:
            values.append(value)
    return [(str(value), {statement.for_each: value}) for value in values]


def check_claims(claims: ClaimsConfig, variants: Variants, source: str) -> None:
    """Refuse, in one line naming the field, a statement naming an unknown arm, an arm that selects
    no variant (or two for a seed), a ``for_each`` key the sweep does not vary, and a sweep with
    fewer seeds than the claims need. (A ``for_each`` key may take one value: reproduce's test size
    keeps one attack of a sweep over six.)"""
    for index, statement in enumerate(claims.statements):
        where = f"{source}: claims.statements.{index}"
        for name in ("predicate", "precondition"):
            text = getattr(statement, name)
            unknown = sorted(parse_comparison(text).arms() - set(claims.arms)) if text else []
            if unknown:
                raise ScenarioError(f"{where}.{name}: unknown arm '{unknown[0]}'"
                                    f"{did_you_mean(unknown[0], claims.arms)} (arms: {', '.join(claims.arms)})")
        for detail, text in enumerate(statement.secondary):
            unknown = sorted(parse_expression(text).arms() - set(claims.arms))
            if unknown:
                raise ScenarioError(f"{where}.secondary.{detail}: unknown arm '{unknown[0]}'"
                                    f"{did_you_mean(unknown[0], claims.arms)} (arms: {', '.join(claims.arms)})")
        labels = groups(statement, variants, claims.arms)
        if statement.for_each is not None and not labels:
            raise ScenarioError(f"{where}.for_each: no variant the statement's arms select has "
                                f"'{statement.for_each}'")
        for label, extra in labels:
            for arm in _arms_of(statement):
                try:
                    chosen = group_seeds(claims.arms[arm], extra, variants)
                except ValueError as err:
                    raise ScenarioError(f"{source}: claims.arms.{arm}: {err}") from None
                if not chosen:
                    at = f" with {statement.for_each}={label}" if label is not None else ""
                    raise ScenarioError(f"{source}: claims.arms.{arm}: selects no variant of the sweep{at}")
                if len(chosen) < claims.seeds:
                    raise ScenarioError(f"{source}: claims.seeds: the claims need {claims.seeds} seeds; arm "
                                        f"'{arm}' has {len(chosen)} in the sweep")


def _arms_of(statement: Statement) -> list[str]:
    arms = parse_comparison(statement.predicate).arms()
    if statement.precondition:
        arms |= parse_comparison(statement.precondition).arms()
    for text in statement.secondary:  # shown over the same paired seeds as the predicate
        arms |= parse_expression(text).arms()
    return sorted(arms)


def evaluate(claims: ClaimsConfig, variants: Variants, metrics: Metrics, source: str,
             required_seeds: int | None = None) -> list[Verdict]:
    """Every statement's verdict from the completed variants' final metrics."""
    need = claims.seeds if required_seeds is None else required_seeds
    verdicts = []
    for index, statement in enumerate(claims.statements):
        found = [_group(claims, statement, index, label, extra, variants, metrics, source, need)
                 for label, extra in groups(statement, variants, claims.arms)]
        overall = min((g.verdict for g in found), key=SEVERITY.index, default=PENDING)
        verdicts.append(Verdict(statement, overall, found))
    return verdicts


def _group(claims: ClaimsConfig, statement: Statement, index: int, label: str | None, extra: dict[str, Any],
           variants: Variants, metrics: Metrics, source: str, need: int) -> GroupVerdict:
    arms = _arms_of(statement)
    by_arm = {arm: group_seeds(claims.arms[arm], extra, variants) for arm in arms}
    seeds = sorted(seed for seed in set.intersection(*(set(s) for s in by_arm.values()))
                   if all(by_arm[arm][seed] in metrics for arm in arms))
    per_seed = [{arm: metrics[by_arm[arm][seed]] for arm in arms} for seed in seeds]
    where = f"{source}: claims.statements.{index}"
    exact = claims.exact(statement)
    predicate = _side(parse_comparison(statement.predicate), per_seed, claims, exact, f"{where}.predicate")
    precondition = (_side(parse_comparison(statement.precondition), per_seed, claims, exact, f"{where}.precondition")
                    if statement.precondition else None)
    details = [_detail(parse_expression(text), per_seed, claims, exact, f"{where}.secondary.{i}")
               for i, text in enumerate(statement.secondary)]
    holds = None if precondition is None else precondition_holds(precondition)
    alone = predicate.interval.verdict() if predicate.interval is not None else None
    if len(seeds) < need or alone is None:
        verdict = PENDING
    elif holds is False:
        verdict = INCONCLUSIVE
    else:
        verdict = alone
    needed = seeds_needed(list(predicate.margins), claims.level) if verdict == TIE else None
    return GroupVerdict(label, verdict, seeds, predicate, precondition, holds, details, alone, needed)


def precondition_holds(side: Side) -> bool | None:
    """A precondition holds by the rule a statement is reproduced by: its interval lies above zero
    (None where no interval could be had)."""
    return None if side.interval is None else side.interval.verdict() == REPRODUCED


def with_q_values(verdicts: Sequence[Sequence[Verdict]], rate: float) -> list[list[Verdict]]:
    """The verdicts with a Benjamini-Hochberg q-value on every testable group (a ``tie``,
    ``reproduced`` or ``not reproduced`` with a p-value: not an exact value), adjusted over all the
    groups given; a called verdict whose q exceeds ``rate`` becomes borderline, and each statement's
    verdict is again the least favourable of its groups'. Adjusting adjusted verdicts again (at any
    rate) gives what adjusting the originals would: each group's call is its predicate's own."""
    p_values = [_p_value(group) for found in verdicts for verdict in found for group in verdict.groups]
    adjusted = iter(q_values([p for p in p_values if p is not None]))
    in_order = iter([None if p is None else next(adjusted) for p in p_values])
    return [[_adjusted(verdict, [next(in_order) for _ in verdict.groups], rate) for verdict in found]
            for found in verdicts]


def _adjusted(verdict: Verdict, qs: list[float | None], rate: float) -> Verdict:
    groups = [_with_q(group, q, rate) for group, q in zip(verdict.groups, qs, strict=True)]
    return replace(verdict, verdict=min((g.verdict for g in groups), key=SEVERITY.index, default=PENDING),
                   groups=groups)


def _p_value(group: GroupVerdict) -> float | None:
    interval = group.predicate.interval if group.predicate is not None else None
    if group.verdict not in TESTABLE or interval is None or math.isnan(interval.p):
        return None
    return interval.p


def _with_q(group: GroupVerdict, q: float | None, rate: float) -> GroupVerdict:
    if q is None or group.predicate_verdict is None:
        return group
    called = group.predicate_verdict
    return replace(group, q=q, verdict=BORDERLINE.get(called, called) if q > rate else called)


def _side(comparison: Comparison, per_seed: list[dict[str, Mapping[str, float]]], claims: ClaimsConfig,
          exact: bool, where: str) -> Side:
    _reported(comparison.operands(), per_seed, where)
    pairs = _divided(comparison.values, per_seed, comparison.text, where)
    margins = [comparison.margin(metrics) for metrics in per_seed]
    interval = paired_interval(margins, claims.level, claims.interval, exact)
    left = sum(p[0] for p in pairs) / len(pairs) if pairs else math.nan
    right = sum(p[1] for p in pairs) / len(pairs) if pairs else math.nan
    return Side(comparison.text, left, right, interval, tuple(margins), tuple(pairs))


def _detail(expression: Expression, per_seed: list[dict[str, Mapping[str, float]]], claims: ClaimsConfig,
            exact: bool, where: str) -> Detail:
    _reported(expression.operands(), per_seed, where)
    values = [value for value, _ in _divided(lambda m: (expression.value(m), 0.0), per_seed, expression.text, where)]
    return Detail(expression.text, paired_interval(values, claims.level, claims.interval, exact))


def _divided(sides: Callable[[ArmMetrics], tuple[float, float]], per_seed: list[dict[str, Mapping[str, float]]],
             text: str, where: str) -> list[tuple[float, float]]:
    """``sides`` on each seed's metrics, refused in one line naming the field where it divides by a
    metric that is zero on some seed: validate can check only the constants (`expressions`)."""
    pairs = []
    for seed, metrics in enumerate(per_seed):
        try:
            pairs.append(sides(metrics))
        except ZeroDivisionError:
            raise ScenarioError(f"{where}: '{text}' divides by a metric that is zero on the {_ordinal(seed + 1)} "
                                "paired seed; the runs are kept, so correct the predicate and evaluate again") from None
    return pairs


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _reported(operands: list[tuple[str, str]], per_seed: list[dict[str, Mapping[str, float]]], where: str) -> None:
    """Refuse, naming the field, an operand whose arm does not report the metric."""
    for arm, metric in operands:
        for metrics in per_seed:
            if metric not in metrics[arm]:
                known = sorted(k for k, v in metrics[arm].items() if isinstance(v, int | float))
                raise ScenarioError(f"{where}: arm '{arm}' reports no metric '{metric}'"
                                    f"{did_you_mean(metric, known)} (it reports: {', '.join(known)})")
