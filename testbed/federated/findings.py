"""What a federated run promised and measured, for the auditor's page (`testbed.report.audit_page`).

Privacy: the accountant's epsilon against the scenario's target (or as spent, without one), and the
canary audit's verdict on it (``federated.privacy.audit``): violated when the empirical lower bound
exceeds the accountant's epsilon, too weak to tell when even a perfect attacker could not show that
epsilon with the run's canaries. Robustness: under an attack, the strategy's final accuracy beside
each baseline arm the run has (one seed: measured, not a verdict).
"""

from __future__ import annotations

import math
from typing import Any

from testbed.federated.audit import PREFIX as AUDIT
from testbed.federated.baselines import NO_ATTACK, NO_PRIVACY
from testbed.report.audit_page import Finding
from testbed.report.render import RunData

AUDIT_STATUS = {"violation": "violated", "consistent": "holds", "too weak": "too weak to tell"}


def federated_findings(data: RunData) -> list[Finding]:
    """The privacy and robustness findings of one federated run folder."""
    federated = data.config.get("federated") or {}
    rounds = [r for r in data.metrics if "round" in r]
    final = dict((data.summary or {}).get("final_metrics") or {})
    privacy = _privacy(federated, rounds)
    spent = [r for r in rounds if "epsilon" in r]
    member = membership_finding(final, float(spent[-1]["epsilon"]) if spent else None)
    return [*privacy, *([member] if member else []), *_robustness(federated, final)]


def _privacy(federated: dict[str, Any], rounds: list[dict[str, Any]]) -> list[Finding]:
    block = federated.get("privacy")
    if not block:
        return []
    spent = [r for r in rounds if "epsilon" in r]
    mechanism = (f"{block.get('mode', 'central')} DP, noise multiplier {block.get('noise_multiplier')}, "
                 f"clipping norm {block.get('clipping_norm')}, delta {block.get('delta')}")
    target = block.get("target_epsilon")
    promised = mechanism + (f", epsilon <= {target}" if target is not None else "")
    if not spent:
        return [Finding("privacy (accountant)", promised, "no round accounted", "not measured")]
    last = spent[-1]
    epsilon = float(last["epsilon"])
    measured = f"epsilon {epsilon:.4g} after round {last['round']} of {federated.get('rounds')}"
    status = "holds" if target is None or epsilon <= float(target) else "violated"
    findings = [Finding("privacy (accountant)", promised, measured, status if target is not None else "measured")]
    verdict = last.get(AUDIT + "verdict")
    if verdict is None:
        findings.append(Finding("privacy (canary audit)", f"the accountant's epsilon {epsilon:.4g} is real",
                                "no audit (federated.privacy.audit)", "not measured"))
        return findings
    lower, power = float(last[AUDIT + "epsilon_lower_bound"]), float(last[AUDIT + "power"])
    level = 1 - float(last.get(AUDIT + "significance", 0.05))
    measured = (f"empirical lower bound {lower:.3g} at confidence {level:.0%} from "
                f"{int(last.get(AUDIT + 'canaries', 0))} canaries; the audit could show at most {power:.3g}")
    needed = last.get(AUDIT + "canaries_needed")
    if verdict == "too weak" and needed:
        measured += f" (about {int(needed)} canaries would test it)"
    findings.append(Finding("privacy (canary audit)", f"the accountant's epsilon {epsilon:.4g} is real", measured,
                            AUDIT_STATUS.get(str(verdict), "measured")))
    return findings


def membership_bound(final: dict[str, Any]) -> float:
    """The larger epsilon lower bound of the two membership-inference attacks (0 where none ran)."""
    return max(float(final.get(f"membership_{a}_epsilon_lower_bound", 0.0)) for a in ("loss", "lira"))


def membership_finding(final: dict[str, Any], epsilon: float | None) -> Finding | None:
    """The membership-inference audit of the final model against the accountant's ``epsilon`` (None:
    a run without DP, which promised nothing to hold it against)."""
    if "membership_lira_tpr_at_1pct" not in final:
        return None
    shown = membership_bound(final)
    ceiling = float(final.get("membership_epsilon_ceiling", math.inf))
    measured = (f"TPR at 1% FPR {float(final.get('membership_loss_tpr_at_1pct', math.nan)):.3f} (loss), "
                f"{float(final['membership_lira_tpr_at_1pct']):.3f} (LiRA): epsilon >= {shown:.3g}; "
                f"these candidates could show at most {ceiling:.3g}")
    if epsilon is None:
        return Finding("privacy (membership inference)", "no DP promised", measured, "measured")
    status = "violated" if shown > epsilon else "too weak to tell" if ceiling < epsilon else "holds"
    return Finding("privacy (membership inference)", f"the final model leaks at most epsilon {epsilon:.4g}",
                   measured, status)


def _robustness(federated: dict[str, Any], final: dict[str, Any]) -> list[Finding]:
    attack = federated.get("attack")
    if not attack:
        return []
    strategy = (federated.get("strategy") or {}).get("name", "?")
    promised = (f"{strategy} trains despite {attack.get('name')} on {attack.get('fraction', '?')} of the clients "
                f"({attack.get('threat_model', 'faithful')} threat model)")
    own = final.get("test_accuracy")
    if own is None:
        return [Finding("robustness", promised, "no accuracy recorded", "not measured")]
    arms = [n for n in federated.get("baselines") or [] if n != NO_PRIVACY and f"baselines.{n}.test_accuracy" in final]
    parts = [f"final test accuracy {float(own):.4f}"]
    for name in arms:
        other = float(final[f"baselines.{name}.test_accuracy"])
        label = "without attackers" if name == NO_ATTACK else f"{name} under the same attack"
        parts.append(f"{label} {other:.4f} ({float(own) - other:+.4f})")
    measured = "; ".join(parts) + " (1 seed: no interval)"
    return [Finding("robustness", promised, measured, "measured")]
