"""The robustness report's "Privacy" section for a federated run with ``federated.privacy``: the
mechanism, epsilon over rounds, test accuracy against epsilon (the privacy-utility curve), and with
``privacy.audit`` the canary audit beside the accountant (`testbed.federated.audit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.federated.audit import PREFIX as AUDIT
from testbed.federated.config import FederatedConfig
from testbed.federated.privacy import epsilon_curve, sampling_rate
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, chance_accuracy, image, table


class PrivacySection(ReportSection):
    """Flower's DP mechanism of the run, its accounting, and accuracy against epsilon."""

    title = "Privacy"

    def render(self, data: RunData, out_dir: Path) -> str:
        rounds = [r for r in data.metrics if "round" in r and "epsilon" in r]
        block = (data.config.get("federated") or {}).get("privacy")
        if not rounds or not block:
            return ""  # no DP: left out of the page
        federated = FederatedConfig.model_validate(data.config["federated"])
        config = federated.privacy
        assert config is not None  # the block is there
        n = int((data.config.get("data") or {}).get("num_clients", 1))
        q = 1.0 if config.mode == "local" else sampling_rate(federated, n)
        mechanism = (f"central DP, {config.clipping} clipping on the {config.clip_on}" if config.mode == "central"
                     else "local DP (Flower's LocalDpMod on every client)")
        rows: list[tuple[str, object]] = [
            ("mechanism", mechanism), ("noise multiplier z", config.noise_multiplier),
            ("clipping norm C" + (" (initial)" if config.clipping == "adaptive" else ""), config.clipping_norm),
            ("sampling rate q (amplification)", q), ("delta", config.delta),
            ("epsilon after the last round", rounds[-1]["epsilon"]),
            ("test accuracy after the last round", rounds[-1].get("test_accuracy", float("nan"))),
            ("rounds run", f"{rounds[-1]['round']} of {federated.rounds}")]
        if config.target_epsilon is not None:
            rows.append(("target epsilon", config.target_epsilon))
            if rounds[-1]["round"] < federated.rounds:
                next_round = rounds[-1]["round"] + 1
                would = epsilon_curve(config, q, next_round)[-1]
                rows.append(("stopped by the target", f"round {next_round} would reach epsilon {would:.4g}"))
        xs = [float(r["epsilon"]) for r in rounds]
        plot_curve(out_dir / "accuracy-vs-epsilon.png", "test accuracy against epsilon",
                   f"epsilon (delta {config.delta:g})",
                   {"test accuracy": (xs, [float(r.get("test_accuracy", float("nan"))) for r in rounds])},
                   ylabel="test accuracy (fraction correct)", chance=chance_accuracy(data))
        plot_curve(out_dir / "epsilon-per-round.png", "epsilon over rounds", "round",
                   {"epsilon": ([float(r["round"]) for r in rounds], xs)}, ylabel=f"epsilon (delta {config.delta:g})")
        note = ("<p>Accounting: RDP of the sampled Gaussian mechanism (opacus), composed over rounds, "
                "add/remove-one-client neighbours (testbed.federated.privacy).</p>")
        return (table(rows, ("measure", "value")) + note + audit_html(rounds[-1], config.delta, config.mode)
                + image("accuracy-vs-epsilon.png", "test accuracy against epsilon")
                + image("epsilon-per-round.png", "epsilon over rounds"))


def audit_html(last: dict[str, Any], delta: float, mode: str = "central") -> str:
    """The canary audit's table and its verdict in words ("" for a run without ``privacy.audit``)."""
    if f"{AUDIT}verdict" not in last:
        return ""
    get = lambda key: last[AUDIT + key]
    confidence = 1 - float(get("significance"))
    rows: list[tuple[str, object]] = [
        ("canary clients (included, drawn with probability 1/2)", f"{get('canaries')} ({get('canaries_included')})"),
        (f"accountant epsilon (delta {delta:g})", get("accountant_epsilon")),
        (f"empirical lower bound on epsilon (confidence {confidence:.0%})", get("epsilon_lower_bound")),
        ("audit power (the most any attacker could show)", get("power")),
        ("verdict", get("verdict"))]
    how = ("Canary clients send a fixed random direction through Flower's DP wrapper with the real "
           "clients; the adversary sees only the released global models and scores each canary by the "
           "sum over rounds of the model's step along its direction" if mode == "central" else
           "Canary clients reply in every round, with their one canary sample (a fixed random direction) or "
           "without it, through the run's LocalDpMod; the adversary, the server, sees each release and scores "
           "each canary by the sum over rounds of its release's step along its direction")
    title = "client-level canaries" if mode == "central" else "sample canaries, local DP"
    return (f"<h3>Audit (one run, {title})</h3>" + table(rows, ("measure", "value"))
            + f"<p>{verdict_words(last, delta)}</p>"
            + f"<p>{how} (Steinke, Nasr and Jagielski 2023: "
              "testbed.federated.audit).</p>")


def verdict_words(last: dict[str, Any], delta: float) -> str:
    """The audit's verdict in one sentence, with its numbers."""
    get = lambda key: last[AUDIT + key]
    accountant, lower, power = float(get("accountant_epsilon")), float(get("epsilon_lower_bound")), float(get("power"))
    confidence = f"{1 - float(get('significance')):.0%}"
    said = get("verdict")
    if said == "violation":
        return (f"Violation: the mechanism leaks more than accounted. With {confidence} confidence epsilon is at "
                f"least {lower:.3g}, above the accountant's {accountant:.3g}.")
    if said == "consistent":
        return (f"Consistent: the audit could have shown up to epsilon {power:.3g}, above the accountant's "
                f"{accountant:.3g}, and showed {lower:.3g} ({confidence} confidence): no leak beyond the "
                "accountant was found.")
    needed = last.get(AUDIT + "canaries_needed")
    more = (f"about {needed} canaries would test it" if needed is not None
            else f"no number of canaries can at delta {delta:g} (the bound's delta term grows with them)")
    return (f"Too weak: with {get('canaries')} canaries no attacker could show more than epsilon {power:.3g}, "
            f"below the accountant's {accountant:.3g}; {more}.")
