"""Report sections of the DFM workload: validity against steps, eta-invariance, co-design consistency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from testbed.report.plots import figure_image, pyplot
from testbed.report.render import RunData
from testbed.report.sections import ArraySection, ReportSection, table
from testbed.workloads.dfm import sequences as seqs


class ValiditySection(ArraySection):
    """Share of valid (non-decreasing) samples against the number of sampling steps."""

    title = "Validity against sampling steps"
    requires = ("sweep_steps", "sweep_etas", "sweep_validity")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        variant = data.config.get("workload", {}).get("variant", "dfm")
        fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=100)
        for eta, row in zip(arrays["sweep_etas"], arrays["sweep_validity"]):
            label = "D3PM (T = steps, trained at T = sample_steps)" if variant == "d3pm" else f"DFM, eta = {eta:g}"
            ax.plot(arrays["sweep_steps"], row, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(arrays["sweep_steps"], [str(s) for s in arrays["sweep_steps"]])
        ax.set(xlabel="sampling steps", ylabel="validity", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return figure_image(fig, out_dir / "dfm-validity.png")


class EtaInvarianceSection(ArraySection):
    """Distribution of (validity, token sum) of samples at eta = 0 and a large eta, on a fine grid."""

    title = "Eta leaves the output distribution unchanged"
    requires = ("data_table", "learned_eta0", "learned_eta_large", "exact_eta0", "exact_eta_large", "exact_eta0_repeat")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        eta = data.config.get("workload", {}).get("invariance_eta", "large")
        fig, axes = pyplot().subplots(1, 2, figsize=(10, 3.6), dpi=100)
        reference = arrays["data_table"][1] / arrays["data_table"].sum()
        for ax, prefix in zip(axes, ("learned", "exact")):
            for name, label in (("eta0", "eta = 0"), ("eta_large", f"eta = {eta}")):
                counts = arrays[f"{prefix}_{name}"]
                ax.step(np.arange(counts.shape[1]), counts[1] / counts.sum(), where="mid", label=f"{label} (valid)")
            ax.step(np.arange(len(reference)), reference, where="mid", color="k", ls=":", label="held-out data")
            invalid = {name: arrays[f"{prefix}_{name}"][0].sum() / arrays[f"{prefix}_{name}"].sum()
                       for name in ("eta0", "eta_large")}
            ax.set(title=f"{prefix} denoiser; invalid: {invalid['eta0']:.3f} vs {invalid['eta_large']:.3f}",
                   xlabel="token sum", ylabel="share of samples")
            ax.legend(fontsize=7)
        rows = [(prefix, seqs.total_variation(arrays[f"{prefix}_eta0"], arrays[f"{prefix}_eta_large"]),
                 seqs.same_distribution_pvalue(arrays[f"{prefix}_eta0"], arrays[f"{prefix}_eta_large"]))
                for prefix in ("learned", "exact")]
        floor = seqs.total_variation(arrays["exact_eta0"], arrays["exact_eta0_repeat"])
        steps = data.config.get("workload", {}).get("invariance_steps", "")
        note = (f"<p>{steps} Euler steps. Sampling-error floor (two independent eta = 0 runs, exact denoiser): "
                f"TV {floor:.3f}.</p>")
        header = ("denoiser", "TV(eta=0, large eta)", "chi-square p")
        return figure_image(fig, out_dir / "dfm-eta.png") + table(rows, header) + note


def _aligned(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``source`` rotated (Kabsch, no reflection) onto ``target``; both are centred ``[P, 2]`` arrays."""
    u, _, vh = np.linalg.svd(source.T @ target)
    correction = np.diag([1.0, np.sign(np.linalg.det(u @ vh))])
    return source @ (u @ correction @ vh)


class ChainsSection(ArraySection):
    """Co-designed chains, each with its sequence refolded by the rule and superposed."""

    title = "Co-designed structures and their refolded sequences"
    requires = ("chains", "refolded", "rmsd_codesign")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        fig, axes = pyplot().subplots(2, 6, figsize=(12, 4.4), dpi=100)
        shown = zip(axes.ravel(), arrays["chains"], arrays["refolded"], arrays["rmsd_codesign"])
        for ax, chain, refolded, rmsd in shown:
            ax.plot(chain[:, 0], chain[:, 1], "o-", ms=3, label="generated")
            ax.plot(*_aligned(refolded, chain).T, "x--", ms=3, label="refolded sequence")
            ax.set(title=f"RMSD {rmsd:.2f}", aspect="equal", xticks=[], yticks=[])
        axes[0, 0].legend(fontsize=6)
        return figure_image(fig, out_dir / "dfm-chains.png")


class ConsistencySection(ArraySection):
    """RMSD between generated structures and their refolded sequences, against random pairing."""

    title = "Co-design consistency against random pairing"
    requires = ("rmsd_codesign", "rmsd_random", "rmsd_threshold")

    def body(self, arrays: dict[str, Any], data: RunData, out_dir: Path) -> str:
        fig, ax = pyplot().subplots(figsize=(5.5, 3.6), dpi=100)
        bins = np.linspace(0, max(arrays["rmsd_random"].max(), 1.0), 40)
        ax.hist(arrays["rmsd_codesign"], bins=bins, alpha=0.7, label="co-designed pairs")
        ax.hist(arrays["rmsd_random"], bins=bins, alpha=0.7, label="random pairing")
        ax.axvline(float(arrays["rmsd_threshold"]), color="k", ls="--", label="threshold")
        ax.set(xlabel="RMSD after superposition (bond lengths)", ylabel="pairs")
        ax.legend(fontsize=8)
        return figure_image(fig, out_dir / "dfm-consistency.png")


SECTIONS: list[ReportSection] = [ValiditySection(), EtaInvarianceSection(), ChainsSection(), ConsistencySection()]
