"""The typed ``claims:`` block of a sweep scenario: arms, statements and how verdicts are called.

Example (from ``scenarios/workloads/bisam.yaml``)::

    claims:
      paper: bisam
      arms:                       # each arm: the sweep variants whose scenario has these values
        bisam: {workload.variant: bisam, workload.surrogate: neg_log, workload.label_noise: 0.4}
        sam: {workload.variant: sam, workload.label_noise: 0.4}
      statements:
        - id: beats-sam-under-noise
          quote: "BiSAM improves test accuracy over SAM"
          source: Table 1
          predicate: bisam.test_accuracy > sam.test_accuracy

A block without ``paper`` holds a researcher's own hypotheses about their sweep ("my rule beats Krum
under LIE by 2 points"): the same paired verdicts in the sweep's report, no quote or source needed,
and never in ``docs/reproduction.md``.

Torch-free (the scenario schema imports it); the checks that need the sweep's variants (every arm
selects variants, one per seed) are in `testbed.claims.evaluate.check_claims`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, field_validator, model_validator

from testbed.claims.expressions import ExpressionError, parse_comparison, parse_expression
from testbed.claims.papers import PAPERS
from testbed.config import StrictModel

ID_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
ARM_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
DEFAULT_SEEDS = 5
StatementType = Literal["claim", "setting", "ablation"]
STATEMENT_TYPES: tuple[str, ...] = get_args(StatementType)  # the order the docs count them in


def _parses_as_expression(text: str) -> str:
    try:
        parse_expression(text)
    except ExpressionError as err:
        raise ValueError(str(err)) from None
    return text


SecondaryText = Annotated[str, AfterValidator(_parses_as_expression)]


class Statement(StrictModel):
    """One claim (the paper's, or a researcher's own), checked as a predicate over the arms' per-seed
    final metrics.

    ``predicate`` compares two expressions (``bisam.test_accuracy > sam.test_accuracy``,
    ``opt.sensor_error / kmeans.sensor_error < 0.5``); per seed its margin is left minus right
    (right minus left for ``<``), and the verdict is called on the interval of the margin's mean.
    ``precondition`` has the same form and is checked over the same paired seeds: where it fails,
    the setting cannot test the claim and the verdict is ``inconclusive``.

    ``type`` keeps the counts honest: only a ``claim`` is something the paper (or the researcher)
    asserts; a ``setting`` checks that the miniature behaves as the setting needs (attacks hurt
    FedAvg), an ``ablation`` that a component of the method matters.
    """

    id: str = Field(pattern=ID_PATTERN, max_length=60)
    type: StatementType = Field("claim", description=(
        "claim: the paper asserts it; setting: a check of the miniature's setting; ablation: a component matters"))
    quote: str | None = Field(None, min_length=1, description="the paper's sentence, with its number")
    source: str | None = Field(None, min_length=1, description="where the paper says it: table, figure or section")
    predicate: str
    precondition: str | None = None
    for_each: str | None = Field(None, description=(
        "a dotted scenario key the sweep varies: the statement is checked for every value of it that "
        "its arms take, and holds only where it holds for each (an arm whose variants lack the key is "
        "shared by every value)"))
    condition: str | None = Field(None, description="the setting the statement is conditional on, in words")
    deterministic: bool | None = Field(None, description=(
        "the predicate's metrics do not depend on the seed (an accountant's output): the row is the exact "
        "value, no interval; unset: the claims block's deterministic"))
    secondary: list[SecondaryText] = Field(default_factory=list, description=(
        "further values shown in the row as detail, each an expression over arm.metric (a metric "
        "that restates the predicate's fact, e.g. 'packed.invented_rate - concat.invented_rate')"))

    @field_validator("for_each")
    @classmethod
    def _not_the_seed(cls, value: str | None) -> str | None:
        if value == "seed":
            raise ValueError("the seeds pair the arms; for_each names another key the sweep varies")
        return value

    @field_validator("predicate", "precondition")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_comparison(value)
            except ExpressionError as err:
                raise ValueError(str(err)) from None
        return value


class TestSize(StrictModel):
    """What ``testbed reproduce --size test`` changes so that every predicate evaluates in CI time."""

    __test__ = False  # not a pytest test class

    set: dict[str, Any] = Field(default_factory=dict, description="dotted overrides of the base scenario")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="grid keys whose values it replaces")


class ClaimsConfig(StrictModel):
    """The claims a sweep scenario checks, and how their verdicts are called."""

    paper: str | None = Field(None, description=(
        "the paper's id in testbed.claims.papers.PAPERS; unset: the researcher's own claims about this sweep"))
    arms: dict[str, dict[str, Any]] = Field(min_length=1, description=(
        "arm name -> dotted scenario keys and values; the arm is the variants whose scenario has them"))
    statements: list[Statement] = Field(min_length=1)
    level: float = Field(0.95, gt=0.5, lt=1.0, description="confidence level of the intervals")
    interval: Literal["t", "bootstrap"] = Field("t", description=(
        "t: Student t interval of the paired mean; bootstrap: percentile bootstrap (10,000 resamples, seed 0)"))
    seeds: int = Field(DEFAULT_SEEDS, ge=1, description="paired seeds a verdict needs")
    fewer_seeds_because: str | None = Field(None, description=f"required when seeds < {DEFAULT_SEEDS}")
    deterministic: bool = Field(False, description=(
        "the default of the statements' deterministic: the metrics do not depend on the seed (accounting), "
        "so one seed gives the exact value, no interval"))
    test_size: TestSize = Field(default_factory=TestSize)

    @field_validator("paper")
    @classmethod
    def _known_paper(cls, value: str | None) -> str | None:
        if value is not None and value not in PAPERS:
            raise ValueError(f"unknown paper '{value}' (known: {', '.join(sorted(PAPERS))})")
        return value

    @field_validator("arms")
    @classmethod
    def _arm_names(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        import re

        for name, selector in value.items():
            if not re.match(ARM_PATTERN, name):
                raise ValueError(f"{name}: an arm name is a Python identifier (letters, digits, _)")
            if not selector:
                raise ValueError(f"{name}: an arm selects variants by at least one key")
            if "seed" in selector:
                raise ValueError(f"{name}: seed: arms are paired by seed, so an arm may not select one")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ClaimsConfig:
        if self.seeds < DEFAULT_SEEDS and not self.fewer_seeds_because:
            raise ValueError(f"seeds: {self.seeds} < {DEFAULT_SEEDS}: say why in fewer_seeds_because")
        ids = [s.id for s in self.statements]
        if len(set(ids)) != len(ids):
            raise ValueError(f"statements: ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
        if self.paper is not None:  # a paper's claim is published with the sentence it checks
            for index, statement in enumerate(self.statements):
                for name in ("quote", "source"):
                    if getattr(statement, name) is None:
                        raise ValueError(f"statements.{index}.{name}: required where the block names a paper "
                                         f"('{self.paper}'); a block without paper holds your own claims")
        return self

    def exact(self, statement: Statement) -> bool:
        """Whether a statement's metrics are seed-independent: its own ``deterministic``, else the block's."""
        return self.deterministic if statement.deterministic is None else statement.deterministic
