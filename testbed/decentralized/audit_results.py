"""What a decentralized run folder says of its privacy: the trained algorithms, the final metrics,
and the canary audit of each pair (source, v) with its verdict. Read by the privacy report
(`testbed.decentralized.report`) and the auditor's page (`testbed.decentralized.findings`).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.decentralized.audit import audit_power
from testbed.decentralized.config import ALGORITHMS
from testbed.report.render import RunData

# Verdicts of the audit of one pair (source, v), the words the page uses for them.
VIOLATION, CONSISTENT, TOO_WEAK = "violation", "consistent", "too weak to test"


def trained_algorithms(data: RunData) -> list[str]:
    """The algorithms the run trained (those with a pairwise epsilon matrix)."""
    return [a for a in ALGORITHMS if f"{a}.pairwise_epsilon" in data.artifacts]


def final_metrics(data: RunData) -> dict:
    """The run's summary final metrics ({} before it completed)."""
    return (data.summary or {}).get("final_metrics", {})


def privacy_block(data: RunData) -> dict:
    """The scenario's ``decentralized.privacy`` block."""
    return (data.config.get("decentralized") or {}).get("privacy", {})


@dataclass(frozen=True)
class PairAudit:
    """The audit of one pair (source, v): its bounds and its verdict (`VIOLATION`, `CONSISTENT`, `TOO_WEAK`)."""

    observer: int
    distance: int
    lower: float
    upper: float
    kind: str


def pair_audits(data: RunData, alg: str, power: float) -> list[PairAudit]:
    """Every audited pair (source, v) of ``alg``, from the run's artifacts, with its verdict."""
    get = lambda key: data.artifacts[f"{alg}.audit_{key}"]
    return [PairAudit(int(v), int(d), float(low), float(up), pair_verdict(float(low), float(up), power))
            for v, d, low, up in zip(get("observer"), get("distance"), get("lower"), get("upper"))]


def pair_verdict(lower: float, upper: float, power: float) -> str:
    """A violation (the audit proves more than the accountant allows), nothing (the bound is beyond
    the audit's reach), or consistent (the audit could have caught it and did not)."""
    if lower > upper:
        return VIOLATION
    return TOO_WEAK if power < upper else CONSISTENT


def algorithm_power(data: RunData, alg: str) -> float:
    """`recorded_power` of ``alg`` with the audit settings of the run's config."""
    config = (data.config.get("decentralized") or {}).get("audit", {})
    return recorded_power(data, alg, int(config.get("canaries", 0)), float(config.get("significance", 0.05)))


def recorded_power(data: RunData, alg: str, canaries: int, significance: float) -> float:
    """The audit's power as the run recorded it (with its draw of canaries); for a run from before
    it was recorded, the bound over every draw (all guesses right) from the config."""
    recorded = final_metrics(data).get(f"{alg}.audit_power")
    if recorded is not None:
        return float(recorded)
    return audit_power(canaries, float(privacy_block(data).get("delta", 1e-5)), significance)
