"""Where a run's numbers come from: the testbed checkout's commit, the scenario file and its overrides,
and the code fingerprint (`run_fingerprint`).

Recorded in every run's ``summary.json`` (``source``, ``fingerprint``) and in the trackers' tags, so
that a number in a report or a reproduction table can be traced to the code and the command that
gave it, and ``testbed reproduce --check`` can tell whether the code of today would still run the
same modules (`fingerprint_at_head`, `fingerprint_changes`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import json
import platform
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from testbed.imports import PACKAGE, module_source
from testbed.run import RunFolder


def provenance(run: RunFolder, source: str) -> dict[str, Any]:
    """Where a run's numbers come from: the scenario file it was started from (``source``, the file
    this process read, where the folder does not record one: a resume reads config.yaml), the
    ``--set`` overrides and the commit."""
    commit = source_commit()
    return {"file": run.read_source() or source, "overrides": run.read_overrides(),
            "commit": commit.removesuffix("+dirty") if commit else None,
            "dirty": commit.endswith("+dirty") if commit else None}


@functools.cache
def source_commit() -> str | None:
    """The commit of the testbed checkout that runs (``+dirty`` with uncommitted changes to tracked
    files), or None for an installed package: the reproduction tables say which code gave a number."""
    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


# -- The code fingerprint of a result --------------------------------------------------------------
#
# A commit says which tree a number came from, but not whether that tree's code still runs today: a
# result from ``abc+dirty`` may rest on an edit that was never committed, and one from a clean commit
# may rest on a module edited since. The fingerprint answers it module by module: the git object id
# of the source of every testbed module the run imported (the same id `git ls-tree` gives, so a
# check against HEAD reads no file and ``git log --find-object=ID`` finds the commits that held
# it), the versions of the distributions it imported, and the BLAS kernel its numbers went through.


def _is_testbed(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def blob_id(data: bytes) -> str:
    """The git object id of a file with these bytes (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def run_fingerprint() -> dict[str, Any]:
    """The fingerprint of the code this process ran: every testbed module it has imported (by the
    time a run ends: the runner, the workload, the strategies and accountants it chose), the
    versions of the distributions it has imported, and the BLAS libraries loaded."""
    files = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items()) if _is_testbed(name)}
    modules = {name: Path(file) for name, file in files.items() if isinstance(file, str) and file.endswith(".py")}
    tops = {name.partition(".")[0] for name in list(sys.modules)}
    return {"modules": {name: _source_id(path) for name, path in sorted(modules.items())},
            "packages": distribution_versions(tops), "blas": blas_kernels()}


def _source_id(path: Path) -> str:
    # A source file gone since it was imported (a checkout switched under a long run) must not fail
    # the run at its end: the fingerprint says so, and no HEAD id will ever match it.
    try:
        return blob_id(path.read_bytes())
    except OSError:
        return "unreadable"


def distribution_versions(top_level: set[str]) -> dict[str, str]:
    """``{distribution: version}`` of the testbed's declared dependencies (extras included) that
    provide one of these imported top-level modules, and the Python version. Only those: they are
    what computes a run's numbers (an upgraded setuptools or matplotlib changes none), and reading
    a few dozen distributions' metadata costs milliseconds where scanning every installed one
    (`importlib.metadata.packages_distributions`) costs most of a second per run."""
    versions = {"python": platform.python_version()}
    for name in sorted(declared_dependencies()):
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if top_level.intersection(_top_level_modules(distribution)):
            versions[distribution.metadata["Name"]] = distribution.version
    return versions


def _top_level_modules(distribution: importlib.metadata.Distribution) -> set[str]:
    """The top-level modules a distribution installs: its ``top_level.txt``, else the first part of
    each installed path (wheels built by meson or maturin write no ``top_level.txt``)."""
    listed = (distribution.read_text("top_level.txt") or "").split()
    if listed:
        return set(listed)
    return {path.parts[0].removesuffix(".py") for path in distribution.files or ()
            if path.parts and not path.parts[0].endswith((".dist-info", ".data"))}


@functools.cache
def declared_dependencies() -> frozenset[str]:
    """The distribution names the installed testbed requires, with every extra's (empty where the
    testbed is not installed as a distribution)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirements = importlib.metadata.requires(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        return frozenset()
    names = set()
    for text in requirements:
        try:
            names.add(Requirement(text).name)
        except InvalidRequirement:
            continue
    return frozenset(names - {PACKAGE})


def blas_kernels() -> list[str]:
    """The BLAS libraries this process has loaded, as ``internal_api version architecture``
    (threadpoolctl's view: ``openblas 0.3.27 SkylakeX``): the same code and inputs round
    differently on another kernel, so a number is tied to the one that gave it."""
    from threadpoolctl import threadpool_info

    return sorted({" ".join(str(info.get(key) or "?") for key in ("internal_api", "version", "architecture"))
                   for info in threadpool_info() if info.get("user_api") == "blas"})


def fingerprint_digest(fingerprint: Mapping[str, Any]) -> str:
    """A short name of a fingerprint (result files keep each once, under this name)."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def fingerprint_at_head(recorded: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``recorded`` would be for a run of the same modules at the checkout's HEAD on this
    machine: each module's id in HEAD's tree (``missing`` where HEAD has no such file), this
    environment's versions of the same distributions, this machine's BLAS. None outside a git
    checkout."""
    tree = head_tree()
    if tree is None:
        return None
    root = Path(__file__).resolve().parent.parent
    modules: dict[str, str] = {}
    for name in recorded.get("modules", {}):
        path = module_source(name)
        relative = path.resolve().relative_to(root).as_posix() if path and path.resolve().is_relative_to(root) else None
        modules[name] = tree.get(relative or "", "missing")
    versions = {"python": platform.python_version()}
    for name in recorded.get("packages", {}):
        if name != "python":
            try:
                versions[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                versions[name] = "missing"
    # BLAS libraries load with the packages that link them: load those the run had imported.
    for top in ("numpy", "scipy.linalg", "torch"):
        if top == "numpy" or top.partition(".")[0] in versions:
            importlib.import_module(top)
    return {"modules": modules, "packages": versions, "blas": blas_kernels()}


@functools.cache
def head_tree() -> dict[str, str] | None:
    """``{path: object id}`` of every file in the checkout's HEAD commit (None outside a checkout)."""
    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".git").exists():
        return None
    try:
        listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "HEAD"],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listing.returncode != 0:
        return None
    tree: dict[str, str] = {}
    for line in listing.stdout.splitlines():
        meta, _, path = line.partition("\t")
        tree[path] = meta.split()[2]
    return tree


def fingerprint_changes(recorded: Mapping[str, Any] | None, now: Mapping[str, Any]) -> list[str]:
    """What differs between a recorded fingerprint and ``now`` (empty when they are the same), as
    short phrases: ``testbed.workloads.vsdm.model changed``, ``testbed.x not in HEAD``, ``numpy 2.1.0 -> 2.2.1``."""
    if not recorded:
        return ["no fingerprint recorded"]
    changes = [f"{name} {'not in HEAD' if now['modules'].get(name) == 'missing' else 'changed'}"
               for name, oid in recorded.get("modules", {}).items() if now["modules"].get(name) != oid]
    changes += [f"{name} {version} -> {now['packages'].get(name, 'missing')}"
                for name, version in recorded.get("packages", {}).items() if now["packages"].get(name) != version]
    # A kernel the run used and this machine lacks: the checking process may have loaded more
    # libraries than the run did (scipy's own OpenBLAS beside numpy's), which is no change.
    gone = [kernel for kernel in recorded.get("blas", []) if kernel not in now.get("blas", [])]
    if gone:
        changes.append(f"BLAS {', '.join(gone)} -> {', '.join(now.get('blas', [])) or 'none'}")
    return changes
