"""The robustness report's "Privacy" section for a federated run with ``federated.privacy``: the
mechanism, epsilon over rounds, and test accuracy against epsilon (the privacy-utility curve)."""

from __future__ import annotations

from pathlib import Path

from testbed.federated.config import FederatedConfig
from testbed.federated.privacy import epsilon_curve, sampling_rate
from testbed.report.plots import plot_curve
from testbed.report.render import RunData
from testbed.report.sections import ReportSection, image, table


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
                   ylabel="test accuracy (fraction correct)")
        plot_curve(out_dir / "epsilon-per-round.png", "epsilon over rounds", "round",
                   {"epsilon": ([float(r["round"]) for r in rounds], xs)}, ylabel=f"epsilon (delta {config.delta:g})")
        note = ("<p>Accounting: RDP of the sampled Gaussian mechanism (opacus), composed over rounds, "
                "add/remove-one-client neighbours (testbed.federated.privacy).</p>")
        return (table(rows, ("measure", "value")) + note
                + image("accuracy-vs-epsilon.png", "test accuracy against epsilon")
                + image("epsilon-per-round.png", "epsilon over rounds"))
