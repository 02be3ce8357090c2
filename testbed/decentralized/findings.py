"""What a decentralized run promised and measured, for the auditor's page (`testbed.report.audit_page`).

Per trained algorithm: the pairwise network-DP budget the scenario asks for (``privacy.target_epsilon``
at ``delta``) against the largest pairwise epsilon the accountant spent, and the canary audit of the
pairs (source, v): violated where an empirical lower bound exceeds its pair's accounted epsilon,
too weak to tell where the audit's power is below it, holds where the audit could have caught a
violation and did not.
"""

from __future__ import annotations

import math

from testbed.decentralized.audit_results import (
    CONSISTENT,
    TOO_WEAK,
    VIOLATION,
    algorithm_power,
    final_metrics,
    pair_audits,
    privacy_block,
    trained_algorithms,
)
from testbed.report.audit_page import Finding
from testbed.report.render import RunData

STATUS = {VIOLATION: "violated", TOO_WEAK: "too weak to tell", CONSISTENT: "holds"}


def decentralized_findings(data: RunData) -> list[Finding]:
    """An accountant row and, where the run audited, an audit row per trained algorithm."""
    privacy, final = privacy_block(data), final_metrics(data)
    target, delta = privacy.get("target_epsilon"), privacy.get("delta")
    findings = []
    for alg in trained_algorithms(data):
        spent = float(final.get(f"{alg}.epsilon_at_stop", math.nan))
        promised = f"{alg}: every pair within epsilon {target} at delta {delta}" if target is not None else (
            f"{alg}: pairwise network DP at delta {delta}")
        status = "measured" if target is None else ("holds" if spent <= float(target) else "violated")
        findings.append(Finding(f"privacy (accountant, {alg})", promised,
                                f"largest pairwise epsilon {spent:.4g}", status))
        if f"{alg}.audit_lower" not in data.artifacts:
            continue
        power = algorithm_power(data, alg)
        pairs = pair_audits(data, alg, power)
        worst = next(kind for kind in (VIOLATION, TOO_WEAK, CONSISTENT) if any(p.kind == kind for p in pairs))
        counts = ", ".join(f"{sum(p.kind == kind for p in pairs)} {kind}" for kind in (VIOLATION, TOO_WEAK, CONSISTENT)
                           if any(p.kind == kind for p in pairs))
        largest = max(p.lower for p in pairs)
        findings.append(Finding(f"privacy (canary audit, {alg})", f"{alg}: the accountant's pairwise epsilons are real",
                                f"{len(pairs)} pairs: {counts}; largest lower bound {largest:.3g}, "
                                f"the audit could show at most {power:.3g}", STATUS[worst]))
    return findings
