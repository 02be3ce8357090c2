"""The registry of scenario workloads: one explicit table, read without importing any workload.

Each entry names, as ``module:attribute`` strings, the workload's typed config and its check (both
in the workload's torch-free ``config`` module) and its `Workload` class. Validating a scenario
imports only the config module; the workload's model code (torch and the rest) is imported when a
run builds it. Installed packages add workloads through the ``testbed.workloads`` entry-point group
(see `testbed.plugins`); a plugin's class carries its own ``Config``, ``check`` and ``summary``.

Every built-in workload follows one pattern: package ``testbed/workloads/<name>/`` with
``config.py`` (``<Prefix>Config`` and ``check``), ``workload.py`` (``<Prefix>Workload``),
``metrics.py`` where it has metrics of its own, and ``report.py`` for its report sections.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.config import StrictModel
    from testbed.data.config import DataConfig
    from testbed.workloads.base import Workload


@dataclass(frozen=True)
class WorkloadEntry:
    """A registered workload: what it is, and where its config, check and class live."""

    summary: str
    config: str
    workload: str
    check: str | None = None
    federated: bool = False  # a `FederatedWorkload`: federated clients can train its model

    @classmethod
    def builtin(cls, package: str, prefix: str, summary: str, federated: bool = False) -> WorkloadEntry:
        module = f"testbed.workloads.{package}"
        return cls(summary, f"{module}.config:{prefix}Config", f"{module}.workload:{prefix}Workload",
                   f"{module}.config:check", federated)


BUILTIN: dict[str, WorkloadEntry] = {
    "classifier": WorkloadEntry.builtin(
        "classifier", "Classifier", "small CNN/MLP classifier on a bundled scikit-learn dataset (digits, wine, ...)",
        federated=True),
    "bisam": WorkloadEntry.builtin(
        "bisam", "BiSAM",
        "BiSAM: SAM whose perturbation ascends a lower bound of the 0-1 loss; sgd|sam|bisam, label noise",
        federated=True),
    "aco": WorkloadEntry.builtin(
        "aco", "ACO", "ACO: non-greedy active feature acquisition from nearest neighbours; aco|greedy|random"),
    "strwae": WorkloadEntry.builtin(
        "strwae", "StrWAE",
        "StrWAE: structured Wasserstein autoencoder; invariance to lighting with 100 labels; strwae|wae|vae_hsic"),
    "vsdm": WorkloadEntry.builtin(
        "vsdm", "VSDM",
        "variational Schrödinger diffusion (learned linear forward score) vs DSM on stretched 2-D shapes"),
    "dfm": WorkloadEntry.builtin(
        "dfm", "DFM",
        "discrete flow models (CTMC, eta-invariant sampler) vs D3PM; Multiflow-style co-design of 2-D chains"),
    "dddm": WorkloadEntry.builtin(
        "dddm", "DDDM",
        "directly denoising diffusion (per-sample estimate buffer, iterative sampler) vs DDIM at equal NFE"),
    "oodrobust": WorkloadEntry.builtin(
        "oodrobust", "OODRobust",
        "OODRobustBench: ID vs OOD (dataset and threat shift) robustness of a model population, linear fit"),
    "gpgvae": WorkloadEntry.builtin(
        "gpgvae", "GPGVAE", "gated-prior graph VAE recovering network-game graphs vs ungated and random priors"),
    "stc": WorkloadEntry.builtin(
        "stc", "STC", "spiking next-frame prediction of moving digits: STC-LIF autaptic gates vs LIF / PLIF",
        federated=True),
    "gridcoarsen": WorkloadEntry.builtin(
        "gridcoarsen", "GridCoarsen",
        "Differentiable Voronoi grid coarsening for parabolic and wave FV solvers; optimised|kmeans|random"),
    "floodgnn": WorkloadEntry.builtin(
        "floodgnn", "FloodGNN",
        "ComGNN pluvial-flood emulator on real DEM regions with simulated storms; comgnn|mpnn|rainincr"),
    "musicflow": WorkloadEntry.builtin(
        "musicflow", "MusicFlow", "cascaded masked flow matching for text-to-music (vs no masking, vs a single stage)"),
    "ppae": WorkloadEntry.builtin(
        "ppae", "PPAE", "precise audio editing via cross-attention control (vs regenerate, vs SDEdit)"),
    "robodreamer": WorkloadEntry.builtin(
        "robodreamer", "RoboDreamer",
        "compositional video diffusion over parsed instruction components vs whole-sentence conditioning"),
    "atradiff": WorkloadEntry.builtin(
        "atradiff", "ATraDiff",
        "trajectory diffusion (horizons, length estimator, pruner) augmenting SAC on MountainCarContinuous"),
}


def resolve(target: str) -> Any:
    """The attribute a ``module:attribute`` string names."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@cache
def _plugins() -> dict[str, type[Workload]]:
    from importlib.metadata import entry_points

    from testbed.plugins import load_entry_points

    if not entry_points(group="testbed.workloads"):
        return {}  # none installed: spare listing and validating the import of the workload base (torch)
    from testbed.workloads.base import Workload

    found: dict[str, Any] = dict.fromkeys(BUILTIN)  # a plugin may not take a built-in name
    added = load_entry_points("testbed.workloads", found, Workload, as_class=True)
    return {name: found[name] for name in added}


def workload_names() -> list[str]:
    """Every registered workload, built-in first, then plugins."""
    return list(BUILTIN) + sorted(_plugins())


def is_registered(name: str) -> bool:
    return name in BUILTIN or name in _plugins()


def summary(name: str) -> str:
    return BUILTIN[name].summary if name in BUILTIN else _plugins()[name].summary


def config_class(name: str) -> type[StrictModel]:
    """The typed config of workload ``name`` (imports only its config module)."""
    return resolve(BUILTIN[name].config) if name in BUILTIN else _plugins()[name].Config


def check_function(name: str) -> Callable[[Any, DataConfig], None]:
    """The check of workload ``name``: rejects config/data combinations that cannot work."""
    if name in BUILTIN:
        target = BUILTIN[name].check
        return resolve(target) if target else (lambda config, data: None)
    return _plugins()[name].check


def is_federated(name: str) -> bool:
    """Whether federated clients can train workload ``name``'s model."""
    if name in BUILTIN:
        return BUILTIN[name].federated
    from testbed.workloads.base import FederatedWorkload

    return issubclass(_plugins()[name], FederatedWorkload)


def workload_class(name: str) -> type[Workload]:
    """The `Workload` class of ``name`` (imports its model code)."""
    return resolve(BUILTIN[name].workload) if name in BUILTIN else _plugins()[name]
