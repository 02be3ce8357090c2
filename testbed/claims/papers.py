"""The table of papers whose claims the testbed checks: the row of each in ``docs/reproduction.md``.

A scenario's ``claims.paper`` names one of these ids; ``testbed reproduce`` runs the scenarios listed
here for a paper, in order, and writes the paper's table into its ``details`` file. A claims block
without ``paper`` (a researcher's own hypotheses) is never listed here: it gets its verdicts in its
sweep's report, and ``testbed reproduce`` refuses a listed scenario whose block names no paper.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """One paper: its title as the docs show it, its details page and the scenarios that test it."""

    title: str
    details: str  # the page under docs/reproduction/ with the hand-written analysis
    scenarios: tuple[str, ...]  # paths under scenarios/


PAPERS: dict[str, Paper] = {
    "sdea": Paper("SDEA (Huang et al.)", "sdea.md",
                  ("federated/sdea-glyphs.yaml", "federated/sdea-paper-miniature.yaml")),
    "randomwalk": Paper("Random-walk DP (Cyffers et al.)", "decentralized.md",
                        ("decentralized/fig1_full.yaml", "decentralized/fig2_utility.yaml",
                         "decentralized/fig2_paper.yaml")),
    "bisam": Paper("BiSAM (Xie et al.)", "bisam.md", ("workloads/bisam.yaml",)),
    "aco": Paper("ACO (Valancius et al.)", "aco.md", ("workloads/aco.yaml",)),
    "strwae": Paper("StrWAE (Lee et al.)", "strwae.md", ("workloads/strwae.yaml",)),
    "vsdm": Paper("VSDM (Deng et al.)", "vsdm.md", ("workloads/vsdm.yaml",)),
    "dfm": Paper("DFM (Campbell et al.)", "dfm.md", ("workloads/dfm.yaml", "workloads/dfm_codesign.yaml")),
    "dddm": Paper("DDDM (Zhang et al.)", "dddm.md", ("workloads/dddm.yaml", "workloads/dddm_digits.yaml")),
    "packing": Paper("Best-fit Packing (Ding et al.)", "pretraining.md",
                     ("pretrain/factrecall.yaml", "pretrain/packing-comparison.yaml")),
    "oodrobust": Paper("OODRobustBench (Li et al.)", "oodrobust.md", ("workloads/oodrobust.yaml",)),
    "gpgvae": Paper("GPGVAE (Yu et al.)", "gpgvae.md", ("workloads/gpgvae.yaml",)),
    "stc": Paper("STC neurons", "stc.md", ("workloads/stc.yaml", "workloads/stc_recall.yaml")),
    "gridcoarsen": Paper("Grid coarsening (differentiable)", "gridcoarsen.md", ("workloads/gridcoarsen.yaml",)),
    "floodgnn": Paper("ComGNN flood GNN", "floodgnn.md", ("workloads/floodgnn.yaml",)),
    "outeffhop": Paper("OutEffHop (Hu et al.)", "outeffhop.md",
                       ("pretrain/outeffhop-opt.yaml", "pretrain/outeffhop-bert.yaml", "pretrain/outeffhop-vit.yaml",
                        "pretrain/outeffhop-sink.yaml", "pretrain/outeffhop-lm.yaml",
                        "pretrain/outeffhop-bert-postln.yaml")),
    "musicflow": Paper("MusicFlow", "musicflow.md", ("workloads/musicflow.yaml",)),
    "ppae": Paper("PPAE", "ppae.md", ("workloads/ppae.yaml",)),
    "robodreamer": Paper("RoboDreamer", "robodreamer.md", ("workloads/robodreamer.yaml",)),
    "atradiff": Paper("ATraDiff", "atradiff.md", ("workloads/atradiff.yaml",)),
}
