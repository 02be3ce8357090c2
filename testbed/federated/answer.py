"""The first lines of a federated report: the scenario's question answered in words.

A robustness page answers "how does the strategy do against its baselines under the attack": each
baseline arm's final accuracy beside the strategy's and their difference. A run is one seed, so the
difference comes without an interval and the page says so (a sweep over seeds gives the interval);
an accuracy still rising at the last round is said too, since a gap between two arms then moves
with the round at which the run stopped. A privacy page answers "what did the privacy cost": the
epsilon the accountant spent, the audit's verdict on it where the run audited, and the accuracy
without privacy (``baselines: [no_privacy]``) beside the private one.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from testbed.federated.audit import PREFIX as AUDIT
from testbed.federated.baselines import NO_ATTACK, NO_PRIVACY
from testbed.federated.findings import membership_bound
from testbed.report.render import RunData
from testbed.report.sections import ReportSection

# Accuracy gained over the last rounds above which the run is said to be still learning.
RISING = 0.01
RISING_ROUNDS = 3
ONE_SEED = "1 seed: no interval; a sweep over seeds gives one"


def _accuracies(data: RunData) -> list[float]:
    return [float(r["test_accuracy"]) for r in data.metrics if "round" in r and "test_accuracy" in r]


def still_rising(accuracies: list[float]) -> str:
    """A sentence when the accuracy rose by more than `RISING` over the last `RISING_ROUNDS` rounds."""
    if len(accuracies) <= RISING_ROUNDS:
        return ""
    gain = accuracies[-1] - accuracies[-1 - RISING_ROUNDS]
    if gain <= RISING:
        return ""
    return (f" Accuracy was still rising at the last round (+{gain:.3f} over the last {RISING_ROUNDS} rounds): "
            "differences between arms depend on when the run stopped.")


class AnswerSection(ReportSection):
    """One paragraph on top of a federated page: the comparison the scenario asks for, in numbers."""

    title = "Answer"

    def render(self, data: RunData, out_dir: Path) -> str:
        federated = data.config.get("federated") or {}
        accuracies = _accuracies(data)
        if not accuracies:
            return ""
        final = dict((data.summary or {}).get("final_metrics") or {})
        kind = (data.config.get("report") or {}).get("kind")
        lines = (self._privacy(federated, data, final, accuracies[-1]) if kind == "privacy"
                 else self._robustness(federated, final, accuracies[-1]))
        return "".join(f"<p>{line}</p>" for line in lines if line) + (
            f"<p>{html.escape(still_rising(accuracies).strip())}</p>" if still_rising(accuracies) else "")

    @staticmethod
    def _robustness(federated: dict[str, Any], final: dict[str, Any], own: float) -> list[str]:
        strategy = (federated.get("strategy") or {}).get("name", "?")
        attack = (federated.get("attack") or {}).get("name")
        under = f" under {attack}" if attack else " without attackers"
        arms = [n for n in federated.get("baselines") or [] if f"baselines.{n}.test_accuracy" in final]
        if not arms:
            return [f"<b>{html.escape(strategy)}{html.escape(under)}</b>: final test accuracy {own:.4f} ({ONE_SEED}). "
                    "No baseline arm ran beside it: <code>federated.baselines: [fedavg, no_attack]</code> "
                    "compares it with FedAvg under the same attack and with itself without it."]
        lines = []
        for name in arms:
            other = float(final[f"baselines.{name}.test_accuracy"])
            if name == NO_ATTACK:
                lines.append(f"<b>{html.escape(strategy)}: cost of the attack</b>: {other:.4f} without attackers, "
                             f"{own:.4f} under {html.escape(str(attack))}: {own - other:+.4f} ({ONE_SEED}).")
            elif name != NO_PRIVACY:
                lines.append(f"<b>{html.escape(strategy)} vs {html.escape(name)}{html.escape(under)}</b>: final test "
                             f"accuracy {own:.4f} vs {other:.4f}, difference {own - other:+.4f} ({ONE_SEED}).")
        return lines

    @staticmethod
    def _privacy(federated: dict[str, Any], data: RunData, final: dict[str, Any], own: float) -> list[str]:
        rounds = [r for r in data.metrics if "round" in r and "epsilon" in r]
        if not rounds:
            return AnswerSection._robustness(federated, final, own)
        last = rounds[-1]
        delta = (federated.get("privacy") or {}).get("delta")
        lines = [f"<b>Privacy spent</b>: epsilon {float(last['epsilon']):.4g} at delta {delta:g} after "
                 f"{last['round']} of {federated.get('rounds')} rounds (the accountant's bound)."]
        verdict = last.get(AUDIT + "verdict")
        if verdict is not None:
            bound = float(last.get(AUDIT + "epsilon_lower_bound", math.nan))
            power = float(last.get(AUDIT + "power", math.nan))
            needed = last.get(AUDIT + "canaries_needed")
            more = f"; about {int(needed)} canaries would test it" if verdict == "too weak" and needed else ""
            lines.append(f"<b>Audit</b>: {html.escape(str(verdict))}: empirical lower bound {bound:.3g} "
                         f"(the audit could show at most {power:.3g}{more}) against the accountant's "
                         f"{float(last['epsilon']):.4g}.")
        else:
            lines.append("<b>Audit</b>: none: the accountant's epsilon is untested by this run; "
                         "<code>federated.privacy.audit: {canaries: 1000}</code> audits the mechanism in the same "
                         "run (<code>scenarios/federated/dp-audit.yaml</code>).")
        if "membership_lira_tpr_at_1pct" in final:
            lines.append(membership_line(final, float(last["epsilon"])))
        if f"baselines.{NO_PRIVACY}.test_accuracy" in final:
            other = float(final[f"baselines.{NO_PRIVACY}.test_accuracy"])
            lines.append(f"<b>Utility cost</b>: test accuracy {own:.4f} with privacy, {other:.4f} without "
                         f"(same rounds, same seed): {own - other:+.4f} ({ONE_SEED}).")
        else:
            lines.append("<b>Utility cost</b>: not measured: <code>federated.baselines: [no_privacy]</code> runs "
                         "the same federation without privacy beside it.")
        return lines


def membership_line(final: dict[str, Any], accountant: float) -> str:
    """The membership-inference audit of the final model in one sentence: each attack's TPR at 1%
    FPR and the epsilon it implies, against the accountant's."""
    shown = membership_bound(final)
    ceiling = final.get("membership_epsilon_ceiling")
    could = f"; with its candidates it could show at most {float(ceiling):.3g}" if ceiling is not None else ""
    return (f"<b>Membership inference</b> on the final model: TPR at 1% FPR "
            f"{float(final.get('membership_loss_tpr_at_1pct', math.nan)):.3f} (loss threshold), "
            f"{float(final['membership_lira_tpr_at_1pct']):.3f} (offline LiRA); it shows epsilon >= {shown:.3g}"
            f"{could}, against the accountant's {accountant:.4g}.")
